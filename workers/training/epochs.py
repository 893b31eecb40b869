"""`run_epochs`: the one epoch machinery — resume, schedule and warm-up, the non-finite check, epoch
statistics, validation, checkpoints — over a `Stepper`, how the models of one training take their
steps (`OneModel` in workers/training/trainer.py, m replicas as one batched model in
workers/training/packed.py)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn

from workers.data import Batch
from workers.data.input_spec import InputSpec
from workers.data.split_port import Draws, Split
from workers.metrics import error_rate, negative_flip_rate
from workers.models.checkpoints import ModelSettings, read_checkpoint, save_checkpoint
from workers.models.predict import predict_logits
from workers.runtime import release_free_memory
from workers.training.config import TrainConfig, lr_schedule


class NonFiniteLossError(RuntimeError):
    """The loss became NaN or Inf; training stopped at `step`."""

    def __init__(self, step: int, epoch: int, value: float) -> None:
        super().__init__(f"loss is {value} at step {step} (epoch {epoch}); training stopped")
        self.step, self.epoch, self.value = step, epoch, value

    def __reduce__(self) -> tuple[Any, ...]:  # travels back from Ray workers intact
        return type(self), (self.step, self.epoch, self.value)


@dataclass
class EpochStats:
    epoch: int
    loss: float
    lr: float
    seconds: float
    samples_per_second: float
    clipped_fraction: float
    val_error_rate: float | None = None
    val_nfr: float | None = None  # NFR on the val split against `val_reference` (the old model's classes)


@dataclass
class TrainResult:
    model: nn.Module
    history: list[EpochStats] = field(default_factory=list)
    steps: int = 0
    epochs_run: int = 0  # epochs trained by this call (0 when a finished checkpoint was reused)
    resumed_from: int = 0  # epochs already done in the checkpoint this call started from
    steps_run: int = 0  # optimiser steps taken by this call


def class_ids(data: Split) -> list[int]:
    """The class ids present in a training split: a model trained on it has `classes_seen` these
    (data growth: NFR against it is counted on these classes only); unlabelled texts add none."""
    return sorted(int(c) for c in torch.unique(data.labels) if c >= 0)


def scoped_nfr(reference: torch.Tensor | None, logits: torch.Tensor, labels: torch.Tensor) -> float | None:
    """NFR against `reference` (the old model's class ids on these samples; -1 marks a sample of a
    class the old model never saw, left out of the count); None without a reference."""
    if reference is None:
        return None
    known = reference >= 0
    if not bool(known.any()):
        return None
    return negative_flip_rate(reference[known], logits[known], labels[known])


def batches(data: Split, config: TrainConfig, epoch: int, inputs: InputSpec | None = None) -> Iterator[Batch]:
    """The epoch's plan: an order seeded by (seed, epoch) and its augmentation draws, so a resumed
    run — on any device — sees the same batches (the split's `training_batches`: a permutation of a
    held split, a streamed split's own seeded order read through `inputs`)."""
    crop, flip = config.augmentation
    resized = crop == "resized"
    padding = 0 if crop == "resized" else crop
    # crops and flips are for images: text batches carry no draws (and so its frozen teachers'
    # logits are computed once per sample, `LogitCache`), whatever `config.augmentation` says
    augment = (resized or padding > 0 or flip) and data.modality == "image"
    draws = Draws(augment, padding, flip, resized)
    return data.training_batches(config.batch_size, config.seed, epoch, inputs, draws)


SYNC_EVERY = 32  # steps between the loop's checks for a non-finite loss (each check waits for the device)


def _first_bad_step(first_bad: torch.Tensor, world: int) -> int:
    """The first step whose loss was not finite (0: none), agreed by every data-parallel process
    (the largest over the processes, an all-reduce): so all of them stop at the same check, and none
    waits forever in the next step's gradient all-reduce for a process that has stopped."""
    if world > 1 and torch.distributed.is_available() and torch.distributed.is_initialized():
        agreed = first_bad.clone()
        torch.distributed.all_reduce(agreed, op=torch.distributed.ReduceOp.MAX)
        return int(agreed.item())
    return int(first_bad.item())


class Stepper(Protocol):
    """How the models of one training take their steps: `OneModel`, or m replicas as one batched
    model (workers/training/packed.py `PackedModels`). `run_epochs` does everything else."""

    optimizer: torch.optim.Optimizer

    def restore(self, states: Sequence[Mapping[str, Any]]) -> None:
        """Weights and optimiser state from each model's checkpoint (in the models' order)."""

    def epoch(self, groups: Iterator[Sequence[Batch]]) -> Iterator[tuple[torch.Tensor, torch.Tensor, int]]:
        """One optimiser step per group (a batch per model); yields each model's loss (k,), whether
        its gradient was clipped (k,), and the samples each model trained on."""
        ...

    def models(self) -> list[nn.Module]:
        """The plain models with their current weights (for validation and checkpoints)."""
        ...

    def optimizer_states(self) -> list[dict[str, Any]]:
        """Each model's optimiser state, in the format a `OneModel` restores."""
        ...


@dataclass
class Member:
    """One model of a training: its settings (the seed is its own) and what happens at its step
    and epoch ends; `checkpoint_path` (with the run's settings) is written each epoch and resumed."""

    config: TrainConfig
    checkpoint_path: str | Path | None = None
    val_reference: torch.Tensor | None = None  # the old model's class ids on val, -1 outside its classes
    on_epoch: Callable[[EpochStats], None] | None = None
    on_step: Callable[[int, int, int], None] | None = None


def _restore(stepper: Stepper, scheduler: Any, members: Sequence[Member], results: Sequence[TrainResult]) -> None:
    """Resume from the members' checkpoints: all of them, at one epoch, or none."""
    paths = [m.checkpoint_path for m in members]
    present = [p is not None and Path(p).exists() for p in paths]
    if not any(present):
        return
    if not all(present):
        raise ValueError("resuming a training of several models needs every model's checkpoint")
    states = [read_checkpoint(p) for p in paths if p is not None]
    if len({int(s["epoch"]) for s in states}) > 1:
        raise ValueError("the checkpoints of a training of several models must be at one epoch")
    stepper.restore(states)
    scheduler.load_state_dict(states[0]["scheduler"])
    for result, state in zip(results, states):
        result.steps, result.resumed_from = int(state["steps"]), int(state["epoch"])
        result.history = [EpochStats(**h) for h in state["history"]]


@dataclass
class _Training:
    """What every epoch of one `run_epochs` shares."""

    stepper: Stepper
    members: Sequence[Member]
    data: Split
    val: Split | None
    settings: ModelSettings | None
    scheduler: Any
    results: list[TrainResult]
    shard: tuple[int, int]
    classes: list[int]  # the training split's class ids (`class_ids`), kept in every checkpoint

    @property
    def config(self) -> TrainConfig:
        return self.members[0].config

    @property
    def device(self) -> torch.device:
        return torch.device(self.config.device)

    @property
    def steps_per_epoch(self) -> int:
        return math.ceil(len(self.data) / self.config.batch_size)

    @property
    def inputs(self) -> InputSpec | None:
        return self.settings.inputs if self.settings is not None else None


@dataclass
class _EpochSums:
    """One epoch's per-step figures, per member, kept on the device: no host sync inside the loop
    but every SYNC_EVERY steps."""

    loss: torch.Tensor
    clipped: torch.Tensor
    first_bad: torch.Tensor  # the first step with a non-finite loss (0: none)
    bad_loss: torch.Tensor
    seen: int = 0

    @classmethod
    def zeros(cls, k: int, device: torch.device) -> _EpochSums:
        return cls(
            torch.zeros(k, device=device),
            torch.zeros(k, dtype=torch.long, device=device),
            torch.zeros((), dtype=torch.long, device=device),
            torch.zeros((), device=device),
        )

    def add(self, losses: torch.Tensor, was_clipped: torch.Tensor, n: int, step: int) -> None:
        finite = torch.isfinite(losses)
        now_bad = (self.first_bad == 0) & ~finite.all()
        self.first_bad = torch.where(now_bad, step, self.first_bad)
        self.bad_loss = torch.where(now_bad, losses[torch.argmin(finite.int())], self.bad_loss)
        self.loss += losses * n
        self.clipped += was_clipped
        self.seen += n


def run_epochs(
    stepper: Stepper,
    members: Sequence[Member],
    data: Split,
    val: Split | None = None,
    settings: ModelSettings | None = None,
    shard: tuple[int, int] = (0, 1),
) -> list[TrainResult]:
    """Train the stepper's models for the epochs their (shared) config asks, from where their
    checkpoints left off: each step a batch per member from its own seeded plan (this process's
    `shard` of it), the schedule stepped, a non-finite loss raised with its step every SYNC_EVERY
    steps; each epoch's statistics and validation per member, its checkpoint (optimiser, schedule,
    epoch, history, config, the training split's classes) and its `on_epoch`."""
    if any(m.checkpoint_path is not None for m in members) and settings is None:
        raise ValueError("checkpoint_path needs the model settings")
    config = members[0].config
    scheduler = lr_schedule(stepper.optimizer, config, math.ceil(len(data) / config.batch_size))
    results = [TrainResult(model) for model in stepper.models()]
    _restore(stepper, scheduler, members, results)
    training = _Training(stepper, members, data, val, settings, scheduler, results, shard, class_ids(data))
    val_inputs = None if val is None else val.for_inference(training.inputs)
    for epoch in range(results[0].resumed_from, config.epochs):
        started = time.perf_counter()
        sums = _train_epoch(training, epoch)
        seconds = time.perf_counter() - started
        release_free_memory()  # the epoch's freed batches, before validation allocates its own
        _end_epoch(training, epoch, sums, seconds, val_inputs)
    return results


def _train_epoch(t: _Training, epoch: int) -> _EpochSums:
    """One epoch's steps: a batch per member each, the schedule stepped, every member's `on_step`;
    NonFiniteLossError at the first sync after a non-finite loss."""
    steps_per_epoch, (rank, world) = t.steps_per_epoch, t.shard
    sums = _EpochSums.zeros(len(t.members), t.device)
    groups: Iterator[Sequence[Batch]] = zip(*(batches(t.data, m.config, epoch, t.inputs) for m in t.members))
    if world > 1:
        groups = ([batch.shard(rank, world) for batch in group] for group in groups)
    for step, (losses, was_clipped, n) in enumerate(t.stepper.epoch(groups), 1):
        t.scheduler.step()
        for result in t.results:
            result.steps += 1
            result.steps_run += 1
        sums.add(losses, was_clipped, n, t.results[0].steps)
        if step % SYNC_EVERY == 0 or step == steps_per_epoch:
            bad_step = _first_bad_step(sums.first_bad, world)
            if bad_step:
                own = int(sums.first_bad.item()) == bad_step
                raise NonFiniteLossError(bad_step, epoch, sums.bad_loss.item() if own else float("nan"))
        for member in t.members:
            if member.on_step is not None:
                member.on_step(epoch + 1, step, steps_per_epoch)
    return sums


def _end_epoch(t: _Training, epoch: int, sums: _EpochSums, seconds: float, val_inputs: Any) -> None:
    """Each member's epoch statistics and validation, its checkpoint and its `on_epoch`."""
    lr = t.stepper.optimizer.param_groups[0]["lr"]
    saving = any(m.checkpoint_path is not None for m in t.members)
    optimizer_states = t.stepper.optimizer_states() if saving else [{}] * len(t.members)
    for r, (member, model, result) in enumerate(zip(t.members, t.stepper.models(), t.results)):
        stats = EpochStats(
            epoch=epoch + 1,
            loss=sums.loss[r].item() / sums.seen,
            lr=lr,
            seconds=seconds,
            samples_per_second=sums.seen / seconds,
            clipped_fraction=sums.clipped[r].item() / t.steps_per_epoch,
        )
        if t.val is not None and val_inputs is not None:
            logits = predict_logits(model, val_inputs, t.config.eval_batch_size, t.device, t.inputs)
            stats.val_error_rate = error_rate(logits, t.val.labels)
            stats.val_nfr = scoped_nfr(member.val_reference, logits, t.val.labels)
        result.history.append(stats)
        result.epochs_run += 1
        if member.checkpoint_path is not None and t.settings is not None:
            save_checkpoint(
                member.checkpoint_path,
                model,
                t.settings,
                classes_seen=t.classes,
                classes=list(t.data.classes),
                optimizer=optimizer_states[r],
                scheduler=t.scheduler.state_dict(),
                epoch=epoch + 1,
                steps=result.steps,
                history=[asdict(h) for h in result.history],
                config=asdict(member.config),
            )
        if member.on_epoch is not None:
            member.on_epoch(stats)
