"""The update pipeline: stages composed by the Ray driver.

    replicas (m Ray tasks, in parallel) → teacher pool (Ray actors) → student (a Ray task that
    distils online from the pool) → BCWI sweep (bcwi only) → evaluation on the regression-eval split

Stage bodies live in workers/ (plain functions); this module only decides what runs where, with
which resources, and wires the results together. Ray is initialised by the caller.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ray
import torch
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from pipelines.spec import SpecError, UpdateSpec, WorkerResources
from orchestrator.progress import StageWatch
from workers import storage
from workers.checkpoints import CheckpointError, ModelSettings, load_model
from workers.data import DataError, DataSplits
from workers.models import ModelError
from workers.objectives import Objective
from workers.stages import DataRequest, TrainJob, cached_splits, data_fingerprint, train_job
from workers.teachers import TeacherActor, TeacherPool, fetch_checkpoint

REPLICA_METHODS = ("elodi", "ensemble")


@dataclass
class StageOutputs:
    """What the stages produced, for evaluation and the run record."""

    splits: DataSplits
    old_checkpoint: str | None = None
    model_checkpoint: str | None = None  # None for the ensemble paragon (nothing single to deploy)
    replicas: list[dict[str, Any]] = field(default_factory=list)
    student: dict[str, Any] | None = None
    teacher_pool: dict[str, Any] | None = None
    paragon_logits: torch.Tensor | None = None
    bcwi: dict[str, Any] | None = None
    seconds: dict[str, float] = field(default_factory=dict)


def data_request(spec: UpdateSpec) -> DataRequest:
    d = spec.data
    return DataRequest(d.source, d.subset, d.val_fraction, d.eval_fraction, d.train_limit, d.eval_limit)


def replica_key(spec: UpdateSpec, data_key: str) -> str:
    """Replicas depend on data (settings and `data_key`, the content's fingerprint), architecture
    and training settings (seed included) only, not on the method."""
    parts = {"data": spec.data.model_dump(mode="json"), "arch": spec.arch, "train": spec.train.model_dump(mode="json"),
             "content": data_key}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:12]


def prepare(spec: UpdateSpec) -> tuple[DataSplits, ModelSettings | None]:
    """Checks that need the data and the old checkpoint, before any training: SpecError if bad."""
    try:
        splits = cached_splits(data_request(spec))
    except DataError as e:
        raise SpecError(f"data: {e}") from None
    if spec.old is None:
        return splits, None
    try:  # the weights are loaded too: a checkpoint of another architecture fails here, not in a worker
        _, old = load_model(fetch_checkpoint(spec.old), spec.allow_user_factories)
    except (CheckpointError, FileNotFoundError, ModelError) as e:
        raise SpecError(f"old: {e}") from None
    if old.num_classes != splits.num_classes:
        raise SpecError(f"old: {spec.old} has {old.num_classes} classes, the data has {splits.num_classes}")
    if (old.in_channels, old.image_size) != (splits.in_channels, splits.image_size):
        raise SpecError(f"old: {spec.old} takes {old.in_channels}×{old.image_size}² images, the data has "
                        f"{splits.in_channels}×{splits.image_size}²")
    if spec.method.name == "bcwi" and old.arch != spec.arch:
        raise SpecError(f"method: bcwi interpolates weights, so arch must equal the old model's ({old.arch!r})")
    return splits, old


def check_resources(spec: UpdateSpec) -> None:
    """Fail fast when the cluster can never hold a stage (Ray would wait forever)."""
    total = ray.cluster_resources()
    cpus, gpus = total.get("CPU", 0.0), total.get("GPU", 0.0)
    r = spec.resources
    if r.replica.cpus > cpus or r.replica.gpus > gpus:
        raise SpecError(f"resources.replica: asks {r.replica.cpus} CPU / {r.replica.gpus} GPU, cluster has {cpus} / {gpus}")
    distill_cpus = r.student.cpus + r.teacher_actors * r.teacher.cpus
    distill_gpus = r.student.gpus + r.teacher_actors * r.teacher.gpus
    if distill_cpus > cpus or distill_gpus > gpus:
        raise SpecError(f"resources: student + {r.teacher_actors} teacher actors need {distill_cpus} CPU / "
                        f"{distill_gpus} GPU at once, cluster has {cpus} / {gpus}")


def _on_worker(function: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """Run a stage body in a Ray worker and note which node ran it."""
    record = function(*args)
    record["node_id"] = ray.get_runtime_context().get_node_id()
    return record


def _threads(cpus: float) -> int:
    return max(1, int(cpus))


def _device(gpus: float) -> str:
    return "cuda" if gpus > 0 else "cpu"


def _train_task(job: TrainJob, queue: Any = None) -> dict[str, Any]:
    """A replica or a model trained alone; progress goes to the driver's queue when it has one."""
    return train_job(job, send_progress=queue.put_nowait if queue is not None else None)


def train_replicas(spec: UpdateSpec, request: DataRequest, watch: StageWatch) -> list[dict[str, Any]]:
    """m replicas of the new architecture, seeds train.seed + 1 … train.seed + m, as parallel Ray
    tasks; a replica whose finished checkpoint exists is reused, a partial one is resumed."""
    res = spec.resources.replica
    base = storage.join(spec.storage, spec.model, "replicas", replica_key(spec, data_fingerprint(request)))
    remote = ray.remote(_on_worker)
    refs = {}
    for i in range(spec.method.m):
        job = TrainJob(
            name=f"replica-{i}", data=request, arch=spec.arch,
            config=spec.train.config(spec.train.seed + 1 + i, _threads(res.cpus), _device(res.gpus)),
            checkpoint_uri=storage.join(base, f"replica-{i}.pt"), allow_user_factories=spec.allow_user_factories,
            nfr_reference=spec.old,
        )
        options = {"num_cpus": res.cpus, "num_gpus": res.gpus, "max_retries": 2, "name": job.name}
        refs[remote.options(**options).remote(_train_task, job, watch.queue)] = job.name
    records: list[dict[str, Any]] = []
    for ref in watch.wait(refs):
        record = ray.get(ref)
        records.append(record)
        how = "reused" if record["epochs_run"] == 0 else f"{record['seconds']:.0f} s, pid {record['pid']}"
        watch.display.finish(record["name"], f"val ER {100 * record['val_error_rate']:.2f} % ({how})")
    return sorted(records, key=lambda r: int(r["name"].rsplit("-", 1)[1]))


def _bundle(resources: WorkerResources) -> dict[str, float]:
    return {name: value for name, value in (("CPU", resources.cpus), ("GPU", resources.gpus)) if value > 0}


def reserve_distillation(spec: UpdateSpec, with_student: bool, timeout_s: float = 300.0) -> PlacementGroup:
    """One placement group for the student (bundle 0, if any) and the teacher actors (the rest):
    all are reserved at once or none, so actors cannot take the CPUs the student needs."""
    r = spec.resources
    bundles = ([_bundle(r.student)] if with_student else []) + [_bundle(r.teacher)] * r.teacher_actors
    group = placement_group(bundles, strategy="PACK", name=f"distil-{spec.spec_hash}")
    ready, _ = ray.wait([group.ready()], timeout=timeout_s)
    if not ready:
        remove_placement_group(group)
        raise SpecError(f"resources: could not reserve {bundles} on the cluster within {timeout_s:.0f} s")
    return group


def start_teacher_pool(spec: UpdateSpec, groups: dict[str, list[str]], group: PlacementGroup, first: int) -> list:
    """The teacher actors, one per bundle from index `first` of the placement group."""
    res = spec.resources.teacher
    actor_class = ray.remote(TeacherActor)
    return [
        actor_class.options(
            num_cpus=res.cpus, num_gpus=res.gpus, max_restarts=2, max_task_retries=2,
            scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=first + i),
        ).remote(groups, _threads(res.cpus), _device(res.gpus), spec.allow_user_factories)
        for i in range(spec.resources.teacher_actors)
    ]


def _distil(job: TrainJob, actors: list, names: tuple[str, ...], topk: dict[str, int], queue: Any = None
            ) -> dict[str, Any]:
    """The student task: trains with reference logits streamed from the teacher pool; the record
    says how many batches the pool delivered (each exactly once per step, also across actor deaths)."""
    pool = TeacherPool(actors, names, topk)
    record = train_job(job, pool, send_progress=queue.put_nowait if queue is not None else None)
    record["teacher_batches"] = pool.deliveries()
    return record


def run_stages(spec: UpdateSpec, watch: StageWatch | None = None) -> StageOutputs:
    """Run every stage the spec's method needs and return their outputs; `watch` shows progress."""
    watch = watch or StageWatch()
    splits, _ = prepare(spec)
    check_resources(spec)
    request = data_request(spec)
    out = StageOutputs(splits=splits, old_checkpoint=spec.old)
    method = spec.method.name
    objective = spec.method.objective()
    if method in REPLICA_METHODS:
        watch.say(f"stage 1/3: training {spec.method.m} replicas of {spec.arch} in parallel")
        t = time.perf_counter()
        out.replicas = train_replicas(spec, request, watch)
        out.seconds["replicas"] = time.perf_counter() - t
    groups: dict[str, list[str]] = {}
    if out.replicas:
        groups["teacher"] = [r["checkpoint"] for r in out.replicas]
    if "old" in objective.references:
        groups["old"] = [spec.old]
    with_student = method != "ensemble"
    group = reserve_distillation(spec, with_student) if groups else None
    actors = start_teacher_pool(spec, groups, group, int(with_student)) if group else []
    try:
        if with_student:
            out.student = _train_student(spec, request, actors, group, watch)
            out.model_checkpoint = out.student["checkpoint"]
            out.seconds["student"] = out.student["seconds"]
        if actors:
            out.teacher_pool = _pool_info(actors, out.student)
        if out.replicas:
            watch.say("evaluating the ensemble paragon through the teacher pool")
            out.paragon_logits = TeacherPool(actors, ("teacher",)).predict(splits.eval, "teacher")
    finally:
        for actor in actors:
            ray.kill(actor)
        if group is not None:
            remove_placement_group(group)
    return out


def pool_topk(objective: Objective, num_classes: int) -> dict[str, int]:
    """Groups the pool sends as top-K only: the ensemble, when LDI selects classes by the teacher."""
    compact = objective.method == "elodi" and objective.topk_by == "teacher" and objective.k < num_classes
    return {"teacher": objective.k} if compact else {}


def distillation_job(spec: UpdateSpec, request: DataRequest, checkpoint_name: str = "model.pt") -> TrainJob:
    """The deployed model's training job: the spec's objective, the student's resources."""
    res = spec.resources.student
    return TrainJob(
        name="student", data=request, arch=spec.arch,
        config=spec.train.config(spec.train.seed, _threads(res.cpus), _device(res.gpus)),
        checkpoint_uri=storage.join(spec.storage, spec.model, spec.version,
                                    f"{spec.spec_hash}-{data_fingerprint(request)[:8]}", checkpoint_name),
        objective=spec.method.objective(), init_from=spec.old if spec.method.name == "bcwi" else None,
        allow_user_factories=spec.allow_user_factories, nfr_reference=spec.old,
    )


def _train_student(
    spec: UpdateSpec, request: DataRequest, actors: list, group: PlacementGroup | None, watch: StageWatch
) -> dict[str, Any]:
    res = spec.resources.student
    job = distillation_job(spec, request)
    objective, method = job.objective, spec.method.name
    options = {"num_cpus": res.cpus, "num_gpus": res.gpus, "max_retries": 2, "name": "student"}
    if group is not None:
        options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=0)
    task = ray.remote(_on_worker).options(**options)
    if objective.references:
        topk = pool_topk(objective, cached_splits(request).num_classes)
        watch.say(f"stage 2/3: distilling the student ({method}) online from {len(actors)} teacher actors")
        ref = task.remote(_distil, job, actors, objective.references, topk, watch.queue)
    else:
        watch.say(f"stage 2/3: training the model ({method})")
        ref = task.remote(_train_task, job, watch.queue)
    record = ray.get(next(watch.wait({ref: job.name})))
    summary = f"val ER {100 * record['val_error_rate']:.2f} %, {record['seconds']:.0f} s ({record['steps']} steps)"
    watch.display.finish(job.name, summary)
    return record


def _pool_info(actors: list, student: dict[str, Any] | None) -> dict[str, Any]:
    infos = ray.get([actor.info.remote() for actor in actors])
    return {
        "actors": len(actors),
        "pids": [i["pid"] for i in infos],
        "batches_served": sum(i["batches_served"] for i in infos),  # since each actor's last (re)start
        "student_steps": student["steps"] if student else 0,
        **{f"batches_{k}": v for k, v in ((student or {}).get("teacher_batches") or {}).items()},
    }
