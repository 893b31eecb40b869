"""Stage bodies that Ray workers run: plain functions over plain records, no Ray calls inside.

`train_job` trains one model (a replica, a student, a fine-tuned model) and stores its checkpoint;
the orchestrator decides where and with which resources it runs.
"""

from __future__ import annotations

import hashlib
import os
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any

import torch

from workers import storage
from workers.checkpoints import CheckpointError, ModelSettings, load_model
from workers.data import DataSplits, load_splits
from workers.data.splits import fingerprint
from workers.inference import ReferenceSource, predict_logits
from workers.objectives import Objective
from workers.progress import ProgressEvent, ProgressReporter
from workers.teachers import fetch_checkpoint
from workers.trainer import EpochStats, TrainConfig, train


@dataclass(frozen=True)
class DataRequest:
    """What `load_splits` needs; hashable so each worker process loads a dataset once."""

    source: str = "fashion-mnist"
    subset: str = "all"
    val_fraction: float = 0.1
    eval_fraction: float = 0.2
    train_limit: int | None = None
    eval_limit: int | None = None


@lru_cache(maxsize=2)
def cached_splits(request: DataRequest) -> DataSplits:
    return load_splits(**asdict(request))


@lru_cache(maxsize=4)
def data_fingerprint(request: DataRequest) -> str:
    """sha256 over the train, validation and eval splits' content; 16 hex digits. With the spec
    hash and the seed it names a stage's checkpoint: same key, same inputs, so a finished stage is
    reused and never retrained, while a changed dataset under the same spec trains afresh."""
    splits = cached_splits(request)
    parts = (fingerprint(splits.train), fingerprint(splits.val), splits.fingerprint)
    return hashlib.sha256(" ".join(parts).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class TrainJob:
    """One model to train and where its checkpoint goes (a local path or an S3 URI)."""

    name: str
    data: DataRequest
    arch: str
    config: TrainConfig
    checkpoint_uri: str
    objective: Objective = field(default_factory=Objective)
    init_from: str | None = None  # start from these weights (BCWI fine-tuning from the old model)
    allow_user_factories: bool = False
    nfr_reference: str | None = None  # old model's checkpoint: each epoch records the val NFR against it


def val_class_ids(uri: str, job: TrainJob, splits: DataSplits) -> torch.Tensor:
    """Class ids of the checkpoint at `uri` on the val split (what the val NFR counts against)."""
    model, _ = load_model(fetch_checkpoint(uri), job.allow_user_factories)
    return predict_logits(model, splits.val, job.config.eval_batch_size, job.config.device).argmax(1)


def train_job(
    job: TrainJob, references: ReferenceSource | None = None, on_epoch: Callable[[EpochStats], None] | None = None,
    send_progress: Callable[[ProgressEvent], object] | None = None,
) -> dict[str, Any]:
    """Train `job`, resuming from its checkpoint if one exists (a finished one is reused as is);
    `send_progress` receives `ProgressEvent`s while it trains.

    Returns a plain record: name, seed, checkpoint, history, steps, epochs_run (0: reused),
    resumed_from (epochs found in the checkpoint: > 0 after a retry or a rerun), pid, host, seconds,
    val_error_rate.
    """
    started = time.perf_counter()
    torch.set_num_threads(job.config.threads)
    splits = cached_splits(job.data)
    settings = ModelSettings(job.arch, splits.num_classes, splits.in_channels, splits.image_size)
    model = settings.build(job.config.seed, job.allow_user_factories)
    if job.init_from is not None:
        start, start_settings = load_model(fetch_checkpoint(job.init_from), job.allow_user_factories)
        if start_settings != settings:
            raise CheckpointError(f"{job.init_from}: built as {start_settings}, cannot start {settings}")
        model.load_state_dict(start.state_dict())
    if storage.is_s3(job.checkpoint_uri):
        local = os.path.join(tempfile.mkdtemp(prefix="congruent-"), f"{job.name}.pt")
        storage.download(job.checkpoint_uri, local)  # resume from a checkpoint an earlier try left
    else:
        local = job.checkpoint_uri

    reporter = None
    if send_progress is not None:
        reporter = ProgressReporter(job.name, job.config.epochs, job.config.batch_size, send_progress)
    val_reference = None if job.nfr_reference is None else val_class_ids(job.nfr_reference, job, splits)

    def keep(stats: EpochStats) -> None:  # every epoch's checkpoint reaches storage: a retry resumes
        storage.upload(local, job.checkpoint_uri)
        if on_epoch is not None:
            on_epoch(stats)
        if reporter is not None:
            reporter.on_epoch(stats)

    result = train(model, splits.train, job.config, job.objective, references, splits.val, settings, local, keep,
                   on_step=reporter.on_step if reporter else None, val_reference=val_reference)
    return {
        "name": job.name,
        "seed": job.config.seed,
        "checkpoint": job.checkpoint_uri,
        "history": [asdict(h) for h in result.history],
        "steps": result.steps,
        "epochs_run": result.epochs_run,
        "resumed_from": result.resumed_from,
        "steps_run": result.steps_run,
        "val_error_rate": result.history[-1].val_error_rate,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "seconds": time.perf_counter() - started,
    }
