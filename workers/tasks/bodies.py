"""Stage bodies that Ray workers run: plain functions over plain records, no Ray calls inside.

`train_job` trains one model (a replica, a student, a fine-tuned model) and stores its checkpoint;
`train_pack` trains several replicas in one process (`train_together`: as one batched model);
`eval_chunks` scores checkpoints on the regression-eval split, chunk by chunk; `bcwi_job` picks BCWI's α;
`registry_checkpoint` and `protected_answers` give what the registry records of a version beside its
ledger. The driver (orchestrator/driver/) decides where and with which resources each runs.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from workers import storage
from workers.metrics import class_ids
from workers.models.checkpoints import classes_seen_of, load_model, read_checkpoint, save_checkpoint
from workers.models.predict import logit_chunks
from workers.progress import ProgressEvent
from workers.runtime import use_threads
from workers.storage import fetch_checkpoint
from workers.tasks.bookkeeping import Bookkeeping
from workers.tasks.records import BcwiRecord, DataRequest, TrainJob, TrainRecord
from workers.tasks.resolve import (
    cached_splits,
    initial_model,
    local_teachers,
    settings_of,
    training_split,
    val_reference,
)
from workers.training.bcwi import select_bcwi
from workers.training.epochs import EpochStats, Member, TrainResult, run_epochs
from workers.training.packed import PackedModels
from workers.training.teacher_logits import LogitSource
from workers.training.trainer import train


def train_job(
    job: TrainJob,
    references: LogitSource | None = None,
    on_epoch: Callable[[EpochStats], None] | None = None,
    send_progress: Callable[[ProgressEvent], object] | None = None,
) -> TrainRecord:
    """Train `job`, resuming from its checkpoint if one exists (a finished one is reused as is);
    reference logits from `references`, else from the job's in-process teachers; `send_progress`
    receives `ProgressEvent`s while it trains."""
    started = time.perf_counter()
    use_threads(job.config.threads)
    splits, settings = cached_splits(job.data), settings_of(job)
    model = initial_model(job)
    books = Bookkeeping.of(job, on_epoch, send_progress)
    references = references if references is not None else local_teachers(job)
    try:
        result = train(
            model,
            training_split(job),
            job.config,
            job.objective,
            references,
            splits.val,
            settings,
            books.local,
            books.epoch_end,
            on_step=books.step,
            val_reference=val_reference(job),
        )
    finally:
        books.drop_local_copy()
    return books.record(result, started)


def train_pack(
    jobs: Sequence[TrainJob], send_progress: Callable[[ProgressEvent], object] | None = None
) -> list[TrainRecord]:
    """Train replicas (same data, architecture and settings, their own seeds) in this process, in
    the jobs' order: one `train_job` for a single job; else finished checkpoints are reused and the
    others trained as one batched model (workers/training/packed.py) from their common epoch — or, should
    they differ after a crash between two checkpoint writes, one after another."""
    if len(jobs) == 1:
        return [train_job(jobs[0], send_progress=send_progress)]
    check_packable(jobs)
    started = time.perf_counter()
    books = [Bookkeeping.of(job, send_progress=send_progress) for job in jobs]
    records: dict[int, TrainRecord] = {}
    try:
        epochs = [b.epochs_done() for b in books]
        todo = [i for i, epoch in enumerate(epochs) if epoch < jobs[i].config.epochs]
        if len(todo) > 1 and len({epochs[i] for i in todo}) == 1:
            chosen = [books[i] for i in todo]
            results = train_together([b.job for b in chosen], [b.member(val_reference(b.job)) for b in chosen])
            records = {i: books[i].record(result, started) for i, result in zip(todo, results)}
    finally:
        for b in books:
            b.drop_local_copy()
    return [records[i] if i in records else train_job(job, send_progress=send_progress) for i, job in enumerate(jobs)]


EVAL_CHUNK_BYTES = 16 << 20  # logits one chunk of the evaluation's stream holds, every output together


@dataclass
class EvalChunk:
    """Consecutive samples of the regression-eval split: {name: float32 logits}, and the samples'
    ids and labels as the split gave them with the samples (a stream: read from the shards)."""

    logits: dict[str, np.ndarray]
    ids: np.ndarray
    labels: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)


def eval_chunks(
    checkpoints: Mapping[str, str],
    data: DataRequest,
    device: str = "cpu",
    allow_user_factories: bool = False,
    ensemble: Sequence[str] = (),
    split_name: str = "eval",
) -> Iterator[EvalChunk]:
    """The logits of each checkpoint on consecutive chunks of the regression-eval split (or of the
    split named `split_name`: "val" for auto's slice check), in order,
    each chunk at most EVAL_CHUNK_BYTES of logits (at least one inference batch), with the
    samples' ids and labels; with `ensemble`, also "paragon": φ_ens = (1/m) Σ_i φ^(i), the mean of
    those m checkpoints' logits. The split is read once and each checkpoint loaded once; no N×C
    array is held."""
    split = getattr(cached_splits(data), split_name)
    by_uri = {uri: name for name, uri in checkpoints.items()}
    members = [by_uri.get(uri, f"ensemble-{i}") for i, uri in enumerate(ensemble)]  # a checkpoint given twice runs once
    models = {}
    for name, uri in [*checkpoints.items(), *zip(members, ensemble)]:
        if name not in models:
            model, settings = load_model(fetch_checkpoint(uri), allow_user_factories)
            models[name] = (model, settings.inputs)
    pending: EvalChunk | None = None  # one buffer a chunk, filled batch by batch (`_buffer`)
    rows = 0
    for chunk in logit_chunks(models, split, device=device):
        assert chunk.ids is not None and chunk.labels is not None, "a split gives its samples' ids and labels"
        outputs = {name: chunk.logits[name].numpy() for name in checkpoints}
        if ensemble:
            outputs["paragon"] = torch.stack([chunk.logits[member] for member in members]).mean(0).numpy()
        if pending is not None and rows + len(chunk.ids) > len(pending):
            yield _first(pending, rows)
            pending = None
        if pending is None:
            pending, rows = _buffer(outputs, len(chunk.ids)), 0
        window = slice(rows, rows + len(chunk.ids))
        for name, out in outputs.items():
            pending.logits[name][window] = out
        pending.ids[window], pending.labels[window] = chunk.ids.numpy(), chunk.labels.numpy()
        rows = window.stop
        del chunk, outputs
    if pending is not None and rows:
        yield _first(pending, rows)


def _buffer(outputs: Mapping[str, np.ndarray], batch: int) -> EvalChunk:
    """Room for EVAL_CHUNK_BYTES of logits like `outputs` (at least one batch), and their samples'
    ids and labels. Copied into, a batch is not held: a batch's small arrays kept alive (its ids,
    from a stream's reading thread) kept each whole batch's memory from being reused: the
    memory-cap benchmark's 4x evaluation was OOM-killed (docs/benchmarks/index.md, attempt 10)."""
    per_sample = sum(out[0].nbytes for out in outputs.values())
    capacity = max(batch, EVAL_CHUNK_BYTES // max(per_sample, 1))
    logits = {name: np.empty((capacity, *out.shape[1:]), np.float32) for name, out in outputs.items()}
    return EvalChunk(logits, np.empty(capacity, np.int64), np.empty(capacity, np.int64))


def _first(chunk: EvalChunk, rows: int) -> EvalChunk:
    return EvalChunk({name: out[:rows] for name, out in chunk.logits.items()}, chunk.ids[:rows], chunk.labels[:rows])


def eval_predictions(
    checkpoints: Mapping[str, str], data: DataRequest, device: str = "cpu", allow_user_factories: bool = False
) -> dict[str, np.ndarray]:
    """{name: N int64 class ids} of each checkpoint on the regression-eval split, in order: each
    chunk of `eval_chunks` reduced to its argmax as it comes (a Tune trial's score: 8 bytes a sample)."""
    ids: dict[str, list[np.ndarray]] = {}
    for chunk in eval_chunks(checkpoints, data, device, allow_user_factories):
        for name, logits in chunk.logits.items():
            ids.setdefault(name, []).append(class_ids(logits))
    return {name: np.concatenate(parts) for name, parts in ids.items()}


def registry_checkpoint(uri: str, fingerprint: str, allow_user_factories: bool = False) -> bytes:
    """The registry's copy of a stage's checkpoint, as the bytes of a `model.pt`: its settings and
    weights (loaded strictly, so a checkpoint that does not load is refused here), its classes_seen
    and class names, and the eval split's `fingerprint`; no optimizer state, epoch or history."""
    path = fetch_checkpoint(uri)
    network, settings = load_model(path, allow_user_factories)
    seen = classes_seen_of(path)
    names = read_checkpoint(path).get("classes")  # the class list, in id order (checkpoints since text)
    with tempfile.TemporaryDirectory() as tmp:
        clean = save_checkpoint(
            Path(tmp, "model.pt"),
            network,
            settings,
            fingerprint=fingerprint,
            **({} if seen is None else {"classes_seen": seen}),
            **({} if names is None else {"classes": list(names)}),
        )
        return clean.read_bytes()


def bcwi_job(
    old_uri: str,
    tuned_uri: str,
    data: DataRequest,
    alphas: Sequence[float],
    er_tolerance: float,
    out_uri: str,
    device: str = "cpu",
    allow_user_factories: bool = False,
) -> BcwiRecord:
    """Interpolate the old and the fine-tuned weights with the α `select_bcwi` picks on the val
    split; store the result at `out_uri` (local or S3)."""
    old, settings = load_model(fetch_checkpoint(old_uri), allow_user_factories)
    tuned_path = fetch_checkpoint(tuned_uri)
    tuned, _ = load_model(tuned_path, allow_user_factories)
    val = cached_splits(data).val
    choice = select_bcwi(old, tuned, val, alphas, er_tolerance, device, settings.inputs)
    tuned.load_state_dict(choice.state_dict)
    seen = classes_seen_of(tuned_path)
    with tempfile.TemporaryDirectory(prefix="congruent-bcwi-") as tmp:
        local = save_checkpoint(
            Path(tmp, "model-bcwi.pt"),
            tuned,
            settings,
            bcwi_alpha=choice.alpha,
            **({} if seen is None else {"classes_seen": seen}),
        )
        held = {int(i): int(c) for i, c in zip(val.ids.tolist(), choice.held_out_classes.tolist(), strict=True)}
        return BcwiRecord(choice.alpha, choice.sweep, storage.upload(local, out_uri), seen, choice.held_out, held)


def check_packable(jobs: Sequence[TrainJob]) -> None:
    """ValueError unless `jobs` are replicas that differ in nothing but the seed: no references, no
    teachers, every weight trained (no frozen backbone), fp32. They may start from weights (`init`,
    `init_from`: the old model's, for `init: old`), the same for all."""
    first = jobs[0]

    def shared(job: TrainJob) -> tuple:
        return job.data, job.arch, replace(job.config, seed=0), job.init, job.init_from, job.inputs

    for job in jobs:
        if job.objective.references or job.teachers:
            raise ValueError(f"{job.name}: only plain replicas (no references, no teachers) train packed")
        if shared(job) != shared(first):
            raise ValueError(f"{job.name}: packed replicas share data, architecture and settings but the seed")
        if job.config.freeze != "none":
            raise ValueError(f"{job.name}: packed replicas train every weight (freeze: backbone needs pack 1)")
        if job.config.precision != "fp32":
            raise ValueError(f"{job.name}: packed replicas train in fp32 (vmap'd BatchNorm has no bf16 autocast)")


def train_together(jobs: Sequence[TrainJob], members: Sequence[Member]) -> list[TrainResult]:
    """Train `jobs` (replicas: same data, architecture and settings, their own seeds; see
    `check_packable`) as one batched model, each job's `member` holding its checkpoint and
    callbacks; results in the jobs' order."""
    check_packable(jobs)
    use_threads(jobs[0].config.threads)
    splits = cached_splits(jobs[0].data)
    settings = settings_of(jobs[0])
    stepper = PackedModels([initial_model(job) for job in jobs], splits.train, jobs[0].config, settings.inputs)
    return run_epochs(stepper, members, splits.train, splits.val, settings)
