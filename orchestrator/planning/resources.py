"""What a spec's stages ask of a cluster, checked against what it has, before any Ray work: pure
functions of the spec and (CPU, GPU) capacities, which execution/cluster.py reads from Ray."""

from __future__ import annotations

import os
from collections.abc import Mapping

from pipelines.spec import SpecError, UpdateSpec, WorkerResources


def local_capacity(spec: UpdateSpec) -> dict[str, float]:
    """What the embedded local Ray will hold, known before it starts: this machine's CPUs (`connect`
    starts it with all of them) and GPUs (counted only when the spec asks for one)."""
    r = spec.resources
    gpus = 0
    if any(w.gpus > 0 for w in (r.replica, r.student, r.teacher)):
        import torch

        gpus = torch.cuda.device_count()
    return {"CPU": float(os.cpu_count() or 1), "GPU": float(gpus)}


def check_resources(
    spec: UpdateSpec, capacity: Mapping[str, float], replicas: bool, student: bool, pool_actors: int
) -> None:
    """SpecError when a cluster of `capacity` ({"CPU": n, "GPU": n}) can never hold a stage the
    method runs (Ray would wait forever): a replica (when `replicas`), or the student (when
    `student`) together with the `pool_actors` teacher actors it is reserved with."""
    cpus, gpus = capacity.get("CPU", 0.0), capacity.get("GPU", 0.0)
    r = spec.resources
    replica_cpus, replica_gpus = r.replica.workers * r.replica.cpus, r.replica.workers * r.replica.gpus
    if replicas and (replica_cpus > cpus or replica_gpus > gpus):
        workers = f"{r.replica.workers} workers × " if r.replica.workers > 1 else ""
        raise SpecError(
            f"resources.replica: asks {workers}{r.replica.cpus} CPU / {r.replica.gpus} GPU, cluster has {cpus} / {gpus}"
        )
    n = r.student.workers if student else 0
    distill_cpus = n * r.student.cpus + pool_actors * r.teacher.cpus
    distill_gpus = n * r.student.gpus + pool_actors * r.teacher.gpus
    if distill_cpus > cpus or distill_gpus > gpus:
        who = ("student" if n == 1 else f"{n} student workers") if n else None
        what = " + ".join(([who] if who else []) + ([f"{pool_actors} teacher actors"] if pool_actors else []))
        raise SpecError(
            f"resources: {what} need {distill_cpus} CPU / {distill_gpus} GPU at once, cluster has {cpus} / {gpus}"
        )


def placeable(
    nodes: list[tuple[float, float]], spread: list[tuple[float, float]], bundles: list[tuple[float, float]]
) -> bool:
    """Whether `spread` bundles (round-robin over the nodes, roomiest first, as the teacher pool's
    SPREAD placement puts them) and then `bundles` (each on the first node it fits, largest first)
    fit the nodes' (CPU, GPU) capacities. A pure function: tests/test_plan.py checks it by hand."""
    free = sorted(([cpu, gpu] for cpu, gpu in nodes), reverse=True)
    for i, (cpu, gpu) in enumerate(spread):
        node = free[i % len(free)] if free else None
        if node is None or node[0] < cpu - 1e-9 or node[1] < gpu - 1e-9:
            return False
        node[0] -= cpu
        node[1] -= gpu
    for cpu, gpu in sorted(bundles, reverse=True):
        node = next((n for n in free if n[0] >= cpu - 1e-9 and n[1] >= gpu - 1e-9), None)
        if node is None:
            return False
        node[0] -= cpu
        node[1] -= gpu
    return True


def check_placement(
    spec: UpdateSpec, nodes: list[tuple[float, float]], replicas: bool, needs_student: bool, pool_actors: int
) -> None:
    """SpecError when a data-parallel stage's workers cannot be placed on the `nodes` (CPU, GPU)
    (Ray Train would wait for them forever): the replica's workers alone, the student's beside the
    teacher actors."""
    r = spec.resources
    if (
        replicas
        and r.replica.workers > 1
        and not placeable(nodes, [], [(r.replica.cpus, r.replica.gpus)] * r.replica.workers)
    ):
        raise SpecError(
            f"resources.replica: {r.replica.workers} workers of {r.replica.cpus} CPU / {r.replica.gpus} "
            f"GPU do not fit on the cluster's nodes {nodes} (CPU, GPU)"
        )
    if (
        needs_student
        and r.student.workers > 1
        and not placeable(
            nodes,
            [(r.teacher.cpus, r.teacher.gpus)] * pool_actors,
            [(r.student.cpus, r.student.gpus)] * r.student.workers,
        )
    ):
        raise SpecError(
            f"resources.student: {r.student.workers} workers of {r.student.cpus} CPU / {r.student.gpus} GPU "
            f"do not fit beside {pool_actors} teacher actors on the cluster's nodes {nodes} (CPU, GPU)"
        )


def bundle(resources: WorkerResources) -> dict[str, float]:
    """A placement-group bundle for one task or actor."""
    return {name: value for name, value in (("CPU", resources.cpus), ("GPU", resources.gpus)) if value > 0}


def threads(cpus: float) -> int:
    """torch threads of a worker holding `cpus` CPUs (never more threads than the cores it holds)."""
    return max(1, int(cpus))


def device(gpus: float) -> str:
    return "cuda" if gpus > 0 else "cpu"
