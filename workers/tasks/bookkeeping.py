"""What a training does besides learning: its checkpoint's local copy (a temporary file for an S3
URI, holding what an earlier try left), each epoch's checkpoint uploaded to storage (so a retry
resumes), progress events, the record it returns; and the checks on a job's stored checkpoint that
a rerun or an interrupt needs."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from workers import storage
from workers.models.checkpoints import CheckpointError, read_checkpoint
from workers.models.starting_weights import trainable_parameters
from workers.progress import ProgressEvent, ProgressReporter
from workers.tasks.records import TrainJob, TrainRecord
from workers.tasks.resolve import cached_splits
from workers.training.epochs import EpochStats, Member, TrainResult, class_ids


def local_checkpoint(job: TrainJob) -> str:
    """Where the job's checkpoint is written locally: its path, or (S3) a temp file holding what an
    earlier try left, to resume from."""
    return storage.working_copy(
        job.checkpoint_uri, lambda: os.path.join(tempfile.mkdtemp(prefix="congruent-"), f"{job.name}.pt")
    )


@dataclass
class Bookkeeping:
    """A job's progress events and its checkpoint's trips to storage, at each step and epoch end."""

    job: TrainJob
    local: str
    on_epoch: Callable[[EpochStats], None] | None = None
    reporter: ProgressReporter | None = None

    @staticmethod
    def of(
        job: TrainJob,
        on_epoch: Callable[[EpochStats], None] | None = None,
        send_progress: Callable[[ProgressEvent], object] | None = None,
    ) -> Bookkeeping:
        reporter = None
        if send_progress is not None:
            reporter = ProgressReporter(job.name, job.config.epochs, job.config.batch_size, send_progress)
        return Bookkeeping(job, local_checkpoint(job), on_epoch, reporter)

    def epoch_end(self, stats: EpochStats) -> None:
        storage.upload(self.local, self.job.checkpoint_uri)
        if self.on_epoch is not None:
            self.on_epoch(stats)
        if self.reporter is not None:
            self.reporter.on_epoch(stats)

    def step(self, epoch: int, step: int, steps_per_epoch: int) -> None:
        if self.reporter is not None:
            self.reporter.on_step(epoch, step, steps_per_epoch)

    def member(self, val_reference: torch.Tensor | None = None) -> Member:
        """The job as a member of `run_epochs`: its config, its local checkpoint, these callbacks."""
        return Member(self.job.config, self.local, val_reference, self.epoch_end, self.step)

    def drop_local_copy(self) -> None:
        """The local copy of an S3 checkpoint goes once training ends: every epoch is in S3."""
        if self.local != self.job.checkpoint_uri:
            shutil.rmtree(os.path.dirname(self.local), ignore_errors=True)

    def epochs_done(self) -> int:
        """Epochs the local checkpoint holds (0: none yet)."""
        return int(read_checkpoint(self.local)["epoch"]) if Path(self.local).exists() else 0

    def record(self, result: TrainResult, started: float) -> TrainRecord:
        return TrainRecord(
            name=self.job.name,
            seed=self.job.config.seed,
            checkpoint=self.job.checkpoint_uri,
            history=[asdict(h) for h in result.history],
            steps=result.steps,
            epochs_run=result.epochs_run,
            resumed_from=result.resumed_from,
            steps_run=result.steps_run,
            val_error_rate=result.history[-1].val_error_rate,
            pid=os.getpid(),
            host=socket.gethostname(),
            seconds=time.perf_counter() - started,
            classes_seen=class_ids(cached_splits(self.job.data).train),
            config=asdict(self.job.config),
            parameters={
                "total": sum(p.numel() for p in result.model.parameters()),
                "trainable": trainable_parameters(result.model),  # the head alone with freeze: backbone
            },
        )


def finished(job: TrainJob) -> bool:
    """Whether `job`'s checkpoint holds its whole training (every epoch), which a rerun reuses as is."""
    uri = job.checkpoint_uri
    with tempfile.TemporaryDirectory(prefix="congruent-check-") as tmp:
        local = storage.working_copy(uri, lambda: os.path.join(tmp, "checkpoint.pt"))
        if not os.path.exists(local):
            return False
        try:
            return int(read_checkpoint(local).get("epoch", 0)) >= job.config.epochs
        except CheckpointError:
            return False


S3_SETTLE_S = 3.0  # how long an S3 server may take to commit a PUT whose client is gone


def discard_unfinished(jobs: Sequence[TrainJob], settle_s: float = S3_SETTLE_S) -> list[str]:
    """Delete the checkpoints of `jobs` that hold a training cut short (after Ctrl-C): a deliberate
    interrupt leaves no partial files, while finished ones stay for a rerun to reuse. (A driver
    that dies instead discards nothing: a rerun resumes its partial checkpoints.) Returns the URIs
    removed.

    On S3, a checkpoint was once found back after a cancel had finished (CI); the likeliest cause is
    a server committing an upload whose body it had received before its task was killed, after this
    deletion had run. So S3 checkpoints are looked at again `settle_s` later, and what came back goes
    too. (`settle_s` is not measured: 3 s is a guess at a busy server's commit time.)"""

    def delete_unfinished() -> list[str]:
        return [job.checkpoint_uri for job in jobs if not finished(job) and storage.delete(job.checkpoint_uri)]

    removed = delete_unfinished()
    if settle_s > 0 and any(storage.store(job.checkpoint_uri).remote for job in jobs):
        time.sleep(settle_s)
        removed += [uri for uri in delete_unfinished() if uri not in removed]
    return removed
