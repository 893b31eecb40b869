"""Stage bodies that Ray workers run: plain functions over plain records, no Ray calls inside.

`train_job` trains one model (a replica, a student, a fine-tuned model) and stores its checkpoint;
`eval_logits` scores checkpoints on the regression-eval split; `bcwi_job` picks BCWI's α. The driver
(orchestrator/driver/) decides where and with which resources each runs.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch

from workers import storage
from workers.bcwi import select_bcwi
from workers.checkpoints import CheckpointError, ModelSettings, classes_seen, load_model, read_checkpoint, save_checkpoint
from workers.data import DataSplits, load_splits
from workers.data.splits import fingerprint
from workers.inference import FrozenModels, LocalReferences, ReferenceSource, predict_logits
from workers.objectives import Objective
from workers.progress import ProgressEvent, ProgressReporter
from workers.storage import fetch_checkpoint
from workers.trainer import EpochStats, TrainConfig, TrainResult, train
from workers.trainer import classes_seen as trainer_classes


@dataclass(frozen=True)
class DataRequest:
    """What `load_splits` needs; hashable so each worker process loads a dataset once."""

    source: str = "fashion-mnist"
    subset: str = "all"
    val_fraction: float = 0.1
    eval_fraction: float = 0.2
    train_limit: int | None = None
    eval_limit: int | None = None
    num_classes: int | None = None  # declared class count (labels with gaps); None: the largest id + 1


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
    teachers: tuple[tuple[str, tuple[str, ...]], ...] = ()  # in-process references: (name, checkpoints)


def local_references(job: TrainJob) -> LocalReferences | None:
    """The job's teachers in this process, on its device (in bf16 when it trains in bf16): the
    reference source without any hop, for teachers that share the student's device."""
    if not job.teachers:
        return None
    return LocalReferences(**{
        name: FrozenModels([load_model(fetch_checkpoint(uri), job.allow_user_factories)[0] for uri in uris],
                           job.config.device, job.config.precision)
        for name, uris in job.teachers
    })


@dataclass
class TrainRecord:
    """What one training reports: where its checkpoint is, its per-epoch history, how much it
    trained (epochs_run 0: a finished checkpoint was reused; resumed_from > 0: after a retry or a
    rerun), where and how long it ran, and — for a distilled student — the teacher pool's count of
    batches (`teacher_batches`)."""

    name: str
    seed: int
    checkpoint: str
    history: list[dict[str, Any]]
    steps: int
    epochs_run: int
    resumed_from: int
    steps_run: int
    val_error_rate: float | None
    pid: int
    host: str
    seconds: float
    node_id: str | None = None  # comma-separated for a data-parallel stage: every node a worker ran on
    teacher_batches: dict[str, Any] | None = None
    classes_seen: list[int] | None = None  # the class ids of its training split


@lru_cache(maxsize=4)
def reference_class_ids(uri: str, data: DataRequest, device: str, allow_user_factories: bool) -> torch.Tensor:
    """Class ids of the checkpoint at `uri` on the val split (what each epoch's val NFR counts
    against), -1 for samples of classes it was not trained on; read once per process."""
    path = fetch_checkpoint(uri)
    model, _ = load_model(path, allow_user_factories)
    val = cached_splits(data).val
    ids = predict_logits(model, val, device=device).argmax(1)
    known = classes_seen(path)
    if known is not None:
        ids[~torch.isin(val.labels, torch.tensor(known))] = -1
    return ids


def local_checkpoint(job: TrainJob) -> str:
    """Where the job's checkpoint is written locally: its path, or (S3) a temp file holding what an
    earlier try left, to resume from."""
    if not storage.is_s3(job.checkpoint_uri):
        return job.checkpoint_uri
    local = os.path.join(tempfile.mkdtemp(prefix="congruent-"), f"{job.name}.pt")
    storage.download(job.checkpoint_uri, local)
    return local


@dataclass
class Bookkeeping:
    """What a training does at each step and epoch end besides learning: progress events, and every
    epoch's checkpoint uploaded to storage (so a retry resumes)."""

    job: TrainJob
    local: str
    on_epoch: Callable[[EpochStats], None] | None = None
    reporter: ProgressReporter | None = None

    @staticmethod
    def of(job: TrainJob, on_epoch: Callable[[EpochStats], None] | None = None,
           send_progress: Callable[[ProgressEvent], object] | None = None) -> "Bookkeeping":
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

    def drop_local_copy(self) -> None:
        """The local copy of an S3 checkpoint goes once training ends: every epoch is in S3."""
        if self.local != self.job.checkpoint_uri:
            shutil.rmtree(os.path.dirname(self.local), ignore_errors=True)

    def step(self, epoch: int, step: int, steps_per_epoch: int) -> None:
        if self.reporter is not None:
            self.reporter.on_step(epoch, step, steps_per_epoch)

    def record(self, result: TrainResult, started: float) -> TrainRecord:
        return TrainRecord(
            name=self.job.name, seed=self.job.config.seed, checkpoint=self.job.checkpoint_uri,
            history=[asdict(h) for h in result.history], steps=result.steps, epochs_run=result.epochs_run,
            resumed_from=result.resumed_from, steps_run=result.steps_run,
            val_error_rate=result.history[-1].val_error_rate, pid=os.getpid(), host=socket.gethostname(),
            seconds=time.perf_counter() - started, classes_seen=trainer_classes(cached_splits(self.job.data).train),
        )


def val_reference(job: TrainJob) -> torch.Tensor | None:
    """The old model's class ids on the val split, when the job records its val NFR."""
    if job.nfr_reference is None:
        return None
    return reference_class_ids(job.nfr_reference, job.data, job.config.device, job.allow_user_factories)


def settings_of(job: TrainJob) -> ModelSettings:
    splits = cached_splits(job.data)
    return ModelSettings(job.arch, splits.num_classes, splits.in_channels, splits.image_size)


def initial_model(job: TrainJob) -> torch.nn.Module:
    """The job's model before training: built from its seed, or from `init_from`'s weights (BCWI's
    fine-tuning), which must be of the same architecture and shapes."""
    settings = settings_of(job)
    model = settings.build(job.config.seed, job.allow_user_factories)
    if job.init_from is not None:
        start, start_settings = load_model(fetch_checkpoint(job.init_from), job.allow_user_factories)
        if start_settings != settings:
            raise CheckpointError(f"{job.init_from}: built as {start_settings}, cannot start {settings}")
        model.load_state_dict(start.state_dict())
    return model


def train_job(
    job: TrainJob, references: ReferenceSource | None = None, on_epoch: Callable[[EpochStats], None] | None = None,
    send_progress: Callable[[ProgressEvent], object] | None = None,
) -> TrainRecord:
    """Train `job`, resuming from its checkpoint if one exists (a finished one is reused as is);
    reference logits from `references`, else from the job's in-process teachers; `send_progress`
    receives `ProgressEvent`s while it trains."""
    started = time.perf_counter()
    torch.set_num_threads(job.config.threads)
    splits, settings = cached_splits(job.data), settings_of(job)
    model = initial_model(job)
    books = Bookkeeping.of(job, on_epoch, send_progress)
    references = references if references is not None else local_references(job)
    try:
        result = train(model, splits.train, job.config, job.objective, references, splits.val, settings, books.local,
                       books.epoch_end, on_step=books.step, val_reference=val_reference(job))
    finally:
        books.drop_local_copy()
    return books.record(result, started)


def train_pack(jobs: Sequence[TrainJob], send_progress: Callable[[ProgressEvent], object] | None = None
               ) -> list[TrainRecord]:
    """Train several replicas in this process: one `train_job` for a single job, else one batched
    model (workers/packed.py)."""
    if len(jobs) == 1:
        return [train_job(jobs[0], send_progress=send_progress)]
    from workers.packed import train_packed

    return train_packed(jobs, send_progress)


def finished(job: TrainJob) -> bool:
    """Whether `job`'s checkpoint holds its whole training (every epoch), which a rerun reuses as is."""
    uri = job.checkpoint_uri
    with tempfile.TemporaryDirectory(prefix="congruent-check-") as tmp:
        local = os.path.join(tmp, "checkpoint.pt") if storage.is_s3(uri) else uri
        if not (storage.download(uri, local) if storage.is_s3(uri) else os.path.exists(local)):
            return False
        try:
            return int(read_checkpoint(local).get("epoch", 0)) >= job.config.epochs
        except CheckpointError:
            return False


def discard_unfinished(jobs: Sequence[TrainJob]) -> list[str]:
    """Delete the checkpoints of `jobs` that hold a training cut short (after Ctrl-C): a deliberate
    interrupt leaves no partial files, while finished ones stay for a rerun to reuse. (A driver
    that dies instead discards nothing: a rerun resumes its partial checkpoints.) Returns the URIs
    removed."""
    return [job.checkpoint_uri for job in jobs if not finished(job) and storage.delete(job.checkpoint_uri)]


def eval_logits(
    checkpoints: Mapping[str, str], data: DataRequest, device: str = "cpu", allow_user_factories: bool = False
) -> dict[str, np.ndarray]:
    """{name: N×C float32 logits} of each checkpoint on the regression-eval split, in order; each
    checkpoint is read once."""
    split = cached_splits(data).eval
    logits = {}
    for name, uri in checkpoints.items():
        model, _ = load_model(fetch_checkpoint(uri), allow_user_factories)
        logits[name] = predict_logits(model, split, device=device).numpy().astype(np.float32)
    return logits


@dataclass(frozen=True)
class BcwiRecord:
    """BCWI's pick: α, the val sweep ({alpha, error_rate, nfr} per α) and the interpolated checkpoint."""

    alpha: float
    sweep: list[dict[str, float]]
    checkpoint: str
    classes_seen: list[int] | None = None


def bcwi_job(
    old_uri: str, tuned_uri: str, data: DataRequest, alphas: Sequence[float], er_tolerance: float, out_uri: str,
    device: str = "cpu", allow_user_factories: bool = False,
) -> BcwiRecord:
    """Interpolate the old and the fine-tuned weights with the α `select_bcwi` picks on the val
    split; store the result at `out_uri` (local or S3)."""
    old, settings = load_model(fetch_checkpoint(old_uri), allow_user_factories)
    tuned_path = fetch_checkpoint(tuned_uri)
    tuned, _ = load_model(tuned_path, allow_user_factories)
    choice = select_bcwi(old, tuned, cached_splits(data).val, alphas, er_tolerance, device)
    tuned.load_state_dict(choice.state_dict)
    seen = classes_seen(tuned_path)
    with tempfile.TemporaryDirectory(prefix="congruent-bcwi-") as tmp:
        local = save_checkpoint(Path(tmp, "model-bcwi.pt"), tuned, settings, bcwi_alpha=choice.alpha,
                                **({} if seen is None else {"classes_seen": list(seen)}))
        return BcwiRecord(choice.alpha, choice.sweep, storage.upload(local, out_uri), None if seen is None else list(seen))
