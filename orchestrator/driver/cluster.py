"""The Ray edge: joining or starting a cluster, what a stage may ask of it, and running a stage body
as a Ray task that notes the node it ran on."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

from pipelines.spec import SpecError, UpdateSpec, WorkerResources
from orchestrator.host import WORKER_ALLOCATORS, worker_env
from workers.errors import first_line

def connect(ray_address: str | None, dashboard: bool = False, worker_logs: bool = True) -> None:
    """Join the cluster whose GCS is at `ray_address` (or RAY_ADDRESS); without one, start Ray in
    this process — with its dashboard when `dashboard` (Ray Train's clean-up watches its runs
    through the State API it serves). The job's workers get this environment's S3 settings through
    the runtime_env. `worker_logs` False keeps the workers' output in Ray's log files instead of
    this terminal."""
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray_address = ray_address or os.environ.get("RAY_ADDRESS")
    if ray.is_initialized():
        return
    # a driver submitted as a Ray Job already gives its workers the job's runtime_env
    runtime_env = None if "RAY_JOB_CONFIG_JSON_ENV_VAR" in os.environ else {"env_vars": worker_env()}
    if runtime_env is not None:
        for name, value in WORKER_ALLOCATORS.items():
            runtime_env["env_vars"].setdefault(name, os.environ.get(name, value))
    if ray_address:
        ray.init(address=ray_address, logging_level=logging.WARNING, runtime_env=runtime_env, log_to_driver=worker_logs)
    else:
        quiet_local_auth()
        ray.init(
            address="local",
            num_cpus=os.cpu_count(),
            object_store_memory=object_store_bytes(),
            include_dashboard=dashboard,
            logging_level=logging.WARNING,
            runtime_env=runtime_env,
            log_to_driver=worker_logs,
        )


def object_store_bytes() -> int | None:
    """The embedded Ray's object store under a cgroup memory limit: Ray's default share (30 %) of
    that limit, not of the machine's memory, which Ray reads from outside the cgroup. None (Ray's
    own default) without a limit."""
    from ray._private.ray_constants import DEFAULT_OBJECT_STORE_MEMORY_PROPORTION, OBJECT_STORE_MINIMUM_MEMORY_BYTES

    from orchestrator.host import memory_limit

    limit = memory_limit()
    if limit is None:
        return None
    return max(OBJECT_STORE_MINIMUM_MEMORY_BYTES, int(limit * DEFAULT_OBJECT_STORE_MEMORY_PROPORTION))


def quiet_local_auth() -> None:
    """The embedded cluster keeps Ray's token authentication (what Ray picks for a new local cluster
    when RAY_AUTH_MODE is unset), chosen explicitly: left unset, Ray picks it and prints a warning
    about it at every start. A RAY_AUTH_MODE of the environment wins."""
    if "RAY_AUTH_MODE" in os.environ:
        return
    os.environ["RAY_AUTH_MODE"] = "token"
    from ray._raylet import Config  # type: ignore[attr-defined]  # ray's _raylet.pyi omits the Cython class

    Config.initialize("")  # Ray reads RAY_AUTH_MODE once, at import; it refreshes it the same way itself


def local_capacity(spec: UpdateSpec) -> dict[str, float]:
    """What the embedded local Ray will hold, known before it starts: this machine's CPUs (`connect`
    starts it with all of them) and GPUs (counted only when the spec asks for one)."""
    r = spec.resources
    gpus = 0
    if any(w.gpus > 0 for w in (r.replica, r.student, r.teacher)):
        import torch

        gpus = torch.cuda.device_count()
    return {"CPU": float(os.cpu_count() or 1), "GPU": float(gpus)}


def check_cluster(spec: UpdateSpec, ray_address: str | None, replicas: bool, student: bool, pool_actors: int) -> None:
    """`check_resources` against the cluster the command runs on, before any Ray work: an existing
    cluster (`ray_address`, RAY_ADDRESS, or one this process already joined) is joined and asked;
    the embedded local Ray is not started here, this machine's cores answer for it. SpecError
    (one line) when a stage could never run."""
    joined = "ray" in sys.modules and sys.modules["ray"].is_initialized()  # no Ray imported: none joined
    if ray_address or os.environ.get("RAY_ADDRESS") or joined:
        import ray

        try:
            connect(ray_address)
        except ConnectionError as e:
            address = ray_address or os.environ.get("RAY_ADDRESS")
            raise SpecError(f"cannot join the Ray cluster at {address} ({first_line(e)})") from None
        capacity = ray.cluster_resources()
        nodes = node_capacities()
    else:
        capacity = local_capacity(spec)
        nodes = [(capacity["CPU"], capacity["GPU"])]
    check_resources(spec, capacity, replicas, student, pool_actors)
    check_placement(spec, nodes, replicas, student, pool_actors)


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


def node_capacities() -> list[tuple[float, float]]:
    """(CPU, GPU) of each alive node of the connected cluster."""
    import ray

    return [(n["Resources"].get("CPU", 0.0), n["Resources"].get("GPU", 0.0)) for n in ray.nodes() if n["Alive"]]


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


def on_node(function: Callable[..., Any], *args: Any) -> Any:
    """Run a stage body in a Ray worker; the records it returns (one, or a list) with a `node_id`
    field learn which node ran them."""
    import ray

    result = function(*args)
    for record in result if isinstance(result, list) else [result]:
        if hasattr(record, "node_id"):
            record.node_id = ray.get_runtime_context().get_node_id()
    return result
