"""One model across several workers: Ray Train data parallelism for a replica or the student.

With `resources.replica.workers` (or `resources.student.workers`) N > 1, the stage trains as a Ray
Train `TorchTrainer`: N workers (DDP over gloo on CPUs, nccl on GPUs), each training its shard of
every step's batch — the epoch's seeded plan, `train.batch_size` samples a step in all, split
rank::N — with the gradients averaged by DDP, so N workers take the steps one process would.
Each epoch, rank 0's checkpoint (the trainer's own format) is reported to Ray Train, which keeps it
under the stage's storage folder (`RunConfig(storage_path=…)`: a local directory or s3://); a failed
worker restarts the group from the last one (`FailureConfig(max_failures=2)`). The finished model
is copied to the stage's usual checkpoint URI, so a rerun of the same spec trains nothing.

The student distils from the one teacher pool: each worker asks the actors for the logits of its
own shard (`TeacherPool`, by index), one request per step. Rank 0 reports progress and the record.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from pipelines.spec import WorkerResources
from workers import storage
from workers.tasks.records import TrainJob, TrainRecord

RECORD = "record.json"  # rank 0's TrainRecord, beside model.pt in every reported checkpoint
MODEL = "model.pt"


def train_loop(config: dict[str, Any]) -> None:
    """Each Ray Train worker: its shard of every step; rank 0 reports each epoch's checkpoint and,
    at the end, the final model with its record."""
    import ray.train

    from workers.tasks.bookkeeping import Bookkeeping
    from workers.tasks.resolve import cached_splits, settings_of, training_split, val_reference
    from workers.training.trainer import train

    job: TrainJob = config["job"]
    _quiet_reports()
    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    started = time.perf_counter()
    splits, settings = cached_splits(job.data), settings_of(job)
    folder = Path(tempfile.mkdtemp(prefix="congruent-ddp-"))
    local = folder / MODEL
    model = _worker_model(job, local)
    references = _references(job, config)
    report = EpochReport(rank, local, _progress(job, config) if rank == 0 else None)
    books = Bookkeeping(job, str(local), reporter=report.reporter)
    result = train(
        model,
        training_split(job),
        job.config,
        job.objective,
        references,
        splits.val if rank == 0 else None,
        settings,
        local,
        report,
        on_step=books.step,
        val_reference=val_reference(job) if rank == 0 else None,
        shard=(rank, world),
    )
    record = books.record(result, started)
    _add_workers(record, references, world)
    report(result.history[-1], asdict(record))  # the final model with its record
    shutil.rmtree(folder, ignore_errors=True)


def _worker_model(job: TrainJob, local: Path) -> Any:
    """The stage's model on this worker's device, DDP-wrapped, its weights restored to `local` from
    Ray Train's last checkpoint when the worker group restarted (or the run is a rerun)."""
    import ray.train
    import torch
    from ray.train.torch import prepare_model

    from workers.tasks.resolve import initial_model

    model = initial_model(job, data_parallel=True)  # BatchNorm synchronised across GPU workers
    restored = ray.train.get_checkpoint()
    if restored is not None:  # a restarted worker group, or a rerun of an unfinished run
        with restored.as_directory() as directory:
            shutil.copyfile(Path(directory, MODEL), local)
    device = torch.device(job.config.device)
    memory_format = torch.channels_last if job.config.channels_last else torch.contiguous_format
    return prepare_model(
        model.to(device, memory_format=memory_format),  # type: ignore[call-overload]  # torch stubs lack (device, memory_format)
        move_to_device=False,
    )


def _references(job: TrainJob, config: dict[str, Any]) -> Any:
    """What the objective distils from: the teacher pool's actors, else teachers in this process;
    None without references."""
    from orchestrator.execution.pool import TeacherPool
    from workers.tasks.resolve import local_teachers

    if not job.objective.references:
        return None
    if config.get("actors"):
        return TeacherPool(config["actors"], job.objective.references, config["train_split"][0], config.get("topk"))
    return local_teachers(job)


def _progress(job: TrainJob, config: dict[str, Any]) -> Any:
    """Rank 0's progress reporter onto the stage's queue, None without one."""
    from workers.progress import ProgressReporter

    if config.get("queue") is None:
        return None
    return ProgressReporter(job.name, job.config.epochs, job.config.batch_size, config["queue"].put_nowait)


class EpochReport:
    """The trainer's end-of-epoch callback: every rank reports its metrics to Ray Train; rank 0 with
    the epoch's checkpoint (and, with `final`, the record beside the finished model)."""

    def __init__(self, rank: int, local: Path, reporter: Any) -> None:
        self.rank, self.local, self.reporter = rank, local, reporter

    def __call__(self, stats: Any, final: dict[str, Any] | None = None) -> None:
        import ray.train
        from ray.train import Checkpoint

        metrics = {"epoch": stats.epoch, "loss": stats.loss, "val_error_rate": stats.val_error_rate}
        if self.rank != 0:
            ray.train.report(metrics)
            return
        if self.reporter is not None and final is None:
            self.reporter.on_epoch(stats)
        with tempfile.TemporaryDirectory() as directory:
            shutil.copyfile(self.local, Path(directory, MODEL))
            if final is not None:
                Path(directory, RECORD).write_text(json.dumps(final))
            ray.train.report(metrics, checkpoint=Checkpoint.from_directory(directory))


def _add_workers(record: TrainRecord, references: Any, world: int) -> None:
    """Every node a worker ran on, and the teacher batches each worker was served, in `record`."""
    import ray
    import torch.distributed as dist

    from orchestrator.execution.pool import TeacherPool

    deliveries = references.deliveries() if isinstance(references, TeacherPool) else None
    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, (ray.get_runtime_context().get_node_id(), deliveries))
    record.node_id = ",".join(sorted({node for node, _ in gathered}))  # every node a worker ran on
    if deliveries is not None:
        per_worker = [worker for _, worker in gathered]
        record.teacher_batches = {**_sum(per_worker), "per_worker": per_worker}


def _quiet_reports() -> None:
    """Progress is ours to draw: no log line per `ray.train.report`. (Ray 2.60 names that logger by
    its file path, outside `ray.train`, so LoggingConfig does not reach it.)"""
    from ray.train.v2._internal.execution import context

    logging.getLogger(context.__file__).setLevel(logging.WARNING)


def _sum(per_worker: list[dict[str, int]]) -> dict[str, int]:
    keys = per_worker[0].keys()
    return {key: sum(worker[key] for worker in per_worker) for key in keys if key != "bytes_per_request"}


def fit(
    job: TrainJob,
    resources: WorkerResources,
    workers: int,
    run_folder: str,
    queue: Any = None,
    actors: list | None = None,
    topk: dict[str, int] | None = None,
    train_split: list | None = None,
) -> TrainRecord:
    """Train `job` on `workers` Ray Train workers (each with `resources`); its Ray Train run lives in
    `run_folder` (local or s3://). A finished model at the job's checkpoint URI is reused as is."""
    from ray.train import CheckpointConfig, FailureConfig, LoggingConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from workers.tasks.bodies import train_job
    from workers.tasks.bookkeeping import finished

    if finished(job):
        return train_job(job)  # reads the finished checkpoint, trains nothing
    # the spot-instance preemption watcher prints an error line per run where nothing is preempted;
    # RAY_TRAIN_ENABLE_PREEMPTION_WATCHER=1 in the environment turns it back on
    os.environ.setdefault("RAY_TRAIN_ENABLE_PREEMPTION_WATCHER", "0")
    base, _, name = run_folder.rstrip("/").rpartition("/")
    trainer = TorchTrainer(
        train_loop,
        train_loop_config={"job": job, "queue": queue, "actors": actors, "topk": topk, "train_split": train_split},
        scaling_config=ScalingConfig(
            num_workers=workers, use_gpu=resources.gpus > 0, resources_per_worker=_per_worker(resources)
        ),
        # mypy resolves ray.train's RunConfig to ray.air's (v1); at run time it is v2's, which takes logging_config
        run_config=RunConfig(  # type: ignore[call-arg]
            name=name,
            storage_path=base,
            failure_config=FailureConfig(max_failures=2),
            checkpoint_config=CheckpointConfig(num_to_keep=2),
            logging_config=LoggingConfig(log_level="WARNING"),
        ),  # our progress, not its reports
    )
    result = trainer.fit()
    assert result.checkpoint is not None  # rank 0 reports the final model's checkpoint last
    with result.checkpoint.as_directory() as directory:
        record = TrainRecord(**json.loads(Path(directory, RECORD).read_text()))
        storage.upload(Path(directory, MODEL), job.checkpoint_uri)
    record.checkpoint = job.checkpoint_uri
    return record


def _per_worker(resources: WorkerResources) -> dict[str, float]:
    return {name: value for name, value in (("CPU", resources.cpus), ("GPU", resources.gpus)) if value > 0}


def run_folder(job: TrainJob) -> str:
    """Where a data-parallel stage's Ray Train run keeps its checkpoints: beside its final model."""
    return job.checkpoint_uri.removesuffix(".pt") + "-train"
