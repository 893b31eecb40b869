"""The pipeline's stages as Ray work: each function submits a stage body of workers/tasks/bodies.py as
Ray tasks with the spec's resources, waits for it while the watch draws progress, and returns the
body's typed record."""

from __future__ import annotations

from typing import Any

import ray

from orchestrator.execution.cluster import on_node
from orchestrator.execution.distributed import fit, run_folder
from orchestrator.execution.pool import PoolHandle, TeacherPool
from orchestrator.execution.watch import StageWatch
from orchestrator.planning.plan import Plan, pool_topk
from orchestrator.planning.resources import device
from pipelines.operations import ResourcesSpec
from workers import storage
from workers.percent import percent
from workers.tasks.bodies import bcwi_job, train_job, train_pack
from workers.tasks.bookkeeping import discard_unfinished
from workers.tasks.records import BcwiRecord, TrainJob, TrainRecord


# By default each stage task runs in a worker process of its own that exits with it (Ray's max_calls,
# its default for GPU tasks): a finished stage's memory (the heap glibc keeps, a CUDA context) goes
# back at once, instead of staying with an idle worker while the next stage, or a stream's readers,
# run beside it — in the capped benchmark one reused worker grew from 0.8 GiB (a replica) through 1.6
# (the student) to 2.6 GiB (the evaluation). Starting a worker costs seconds; a stage usually costs
# minutes, and `resources.fresh_stage_workers: false` saves those seconds where it does not.
def stage_task(body: Any, resources: ResourcesSpec) -> Any:
    """`body` as a Ray task whose worker process exits after running it once (max_calls 1), or, with
    `resources.fresh_stage_workers` false, one an idle worker may take (max_calls 0: unlimited)."""
    return ray.remote(max_calls=1 if resources.fresh_stage_workers else 0)(body)


def _train(job: TrainJob, queue: Any = None, pool: TeacherPool | None = None) -> TrainRecord:
    """A training task: progress to the driver's queue (when it has one); with a teacher pool, the
    record says how many batches the pool delivered (each exactly once per step, also across actor
    deaths)."""
    record = train_job(job, pool, send_progress=queue.put_nowait if queue is not None else None)
    if pool is not None:
        record.teacher_batches = pool.deliveries()
    return record


def _summary(record: TrainRecord) -> str:
    assert record.val_error_rate is not None  # the stages train with the val split
    return f"val ER {percent(record.val_error_rate)}"


def _pack_task(jobs: list[TrainJob], queue: Any = None) -> list[TrainRecord]:
    """A replica task: its pack of replicas (one or more), progress to the driver's queue."""
    return train_pack(jobs, send_progress=queue.put_nowait if queue is not None else None)


def train_replicas(plan: Plan, watch: StageWatch) -> list[TrainRecord]:
    """m replicas as parallel Ray tasks (`resources.replica` each, retried twice), `pack` replicas
    per task trained as one batched model, or each over `workers` Ray Train workers; a replica whose
    finished checkpoint exists is reused, a partial one resumed. On Ctrl-C the running ones are
    cancelled and their partial checkpoints deleted; finished ones stay for a rerun."""
    res = plan.spec.resources.replica
    task = stage_task(on_node, plan.spec.resources)
    jobs = plan.replica_jobs()
    if res.workers > 1:
        return _collect(
            watch,
            jobs,
            {_fit_remotely(job).remote(job, res, res.workers, run_folder(job), watch.queue): job.name for job in jobs},
        )
    packs = [jobs[i : i + res.pack] for i in range(0, len(jobs), res.pack)]
    refs = {}
    for pack in packs:
        name = pack[0].name if len(pack) == 1 else f"{pack[0].name}…{pack[-1].name.rsplit('-', 1)[1]}"
        for job in pack[1:]:
            watch.display.add(job.name)
        ref = task.options(num_cpus=res.cpus, num_gpus=res.gpus, max_retries=2, name=name).remote(
            _pack_task, pack, watch.queue
        )
        refs[ref] = pack[0].name
    return _collect(watch, jobs, refs)


def _collect(watch: StageWatch, jobs: list[TrainJob], refs: dict) -> list[TrainRecord]:
    """The replicas' records as their tasks finish (a task returns one record or a pack's list); on
    Ctrl-C, the checkpoints of the jobs not finished are discarded."""
    records = []
    try:
        for ref in watch.wait(refs):
            done = ray.get(ref)
            for record in done if isinstance(done, list) else [done]:
                records.append(record)
                how = "reused" if record.epochs_run == 0 else f"{record.seconds:.0f} s, pid {record.pid}"
                watch.display.finish(record.name, f"{_summary(record)} ({how})")
    except KeyboardInterrupt:
        _discard([job for job in jobs if job.name not in {record.name for record in records}])
        raise
    return sorted(records, key=lambda r: int(r.name.rsplit("-", 1)[1]))


def _discard(jobs: list[TrainJob]) -> None:
    """After Ctrl-C: the partial checkpoints of `jobs`, and their Ray Train runs' folders."""
    discard_unfinished(jobs)
    for job in jobs:
        storage.delete_tree(run_folder(job))


def _fit_remotely(job: TrainJob) -> Any:
    """A data-parallel stage's launcher: a Ray task holding no resources (its Ray Train workers hold
    them) that runs `TorchTrainer.fit`, so that several such stages run at once."""
    return ray.remote(fit).options(num_cpus=0, max_retries=0, name=f"{job.name}-launcher")


def train_student(plan: Plan, watch: StageWatch, pool: PoolHandle | None, job: TrainJob | None = None) -> TrainRecord:
    """The deployed model as one Ray task (`resources.student`), in the pool's placement group when
    it distils from the pool (or with its teachers in its own process, `job.teachers`)."""
    job = job or plan.student_job()
    res = plan.spec.resources.student
    if res.workers > 1:
        actors = pool.actors if job.objective.references and pool is not None else None
        topk = pool_topk(job.objective, plan.splits.num_classes) if actors else None
        ref = _fit_remotely(job).remote(
            job,
            res,
            res.workers,
            run_folder(job),
            watch.queue,
            actors,
            topk,
            [pool.train_split] if actors and pool is not None else None,  # actors come from the pool
        )
        try:
            record: TrainRecord = ray.get(next(watch.wait({ref: job.name})))
        except KeyboardInterrupt:  # cancelled by the watch: its partial checkpoints go
            _discard([job])
            raise
        watch.display.finish(
            job.name, f"{_summary(record)}, {record.seconds:.0f} s ({record.steps} steps, {res.workers} workers)"
        )
        return record
    return train_students(plan, watch, pool, [job])[0]


def train_students(plan: Plan, watch: StageWatch, pool: PoolHandle | None, jobs: list[TrainJob]) -> list[TrainRecord]:
    """Single-task trainings (`resources.student` each) submitted at once, their records in the
    order of `jobs`: in the pool's placement group when there is a pool (which reserves one student:
    they then run in turn), else side by side as the cluster's CPUs allow (teachers in process)."""
    res = plan.spec.resources.student
    refs = {}
    for job in jobs:
        options: dict[str, Any] = {"num_cpus": res.cpus, "num_gpus": res.gpus, "max_retries": 2, "name": job.name}
        client = None
        if pool is not None:  # the student's resources are reserved with the pool (auto: also a plain candidate's)
            options["scheduling_strategy"] = pool.student_strategy()
        if job.objective.references and pool is not None:
            client = pool.client(job.objective.references, pool_topk(job.objective, plan.splits.num_classes))
        refs[stage_task(on_node, plan.spec.resources).options(**options).remote(_train, job, watch.queue, client)] = (
            job.name
        )
    records: dict[str, TrainRecord] = {}
    try:
        for ref in watch.wait(refs):
            record = ray.get(ref)
            records[refs[ref]] = record
            watch.display.finish(refs[ref], f"{_summary(record)}, {record.seconds:.0f} s ({record.steps} steps)")
    except KeyboardInterrupt:  # cancelled by the watch: their partial checkpoints go
        discard_unfinished([job for job in jobs if job.name not in records])
        raise
    return [records[job.name] for job in jobs]


def run_bcwi(plan: Plan, tuned: TrainRecord) -> BcwiRecord:
    """BCWI's α picked on the val split by a Ray task (`resources.student`), the interpolated model
    stored next to the fine-tuned one."""
    spec, res = plan.spec, plan.spec.resources.student
    task = stage_task(bcwi_job, spec.resources).options(
        num_cpus=res.cpus, num_gpus=res.gpus, max_retries=2, name="bcwi"
    )
    alphas, tolerance = plan.bcwi_sweep
    assert spec.old is not None  # the spec's validator requires old for bcwi
    ref = task.remote(
        spec.old,
        tuned.checkpoint,
        plan.data,
        alphas,
        tolerance,
        plan.bcwi_checkpoint(),
        device(res.gpus),
        spec.allow_user_factories,
    )
    try:
        return ray.get(ref)
    except KeyboardInterrupt:  # the interpolated checkpoint may be half written
        ray.cancel(ref, force=True)
        ray.wait([ref], timeout=30)
        storage.delete(plan.bcwi_checkpoint())
        raise
