"""The training loop every stage runs: plain PyTorch, no Ray inside.

    model = build_model("small-cnn", 10, seed=0)
    result = train(model, splits.train, TrainConfig(epochs=5), Objective("fd-lm"),
                   references=LocalReferences(old=FrozenModels([old_model])), val=splits.val)

SGD with Nesterov momentum and a cosine or step schedule after an optional linear warm-up. The
training split is moved to the training device once (uint8); each step takes a batch from the
epoch's seeded plan (workers/data/batches.py), gathers and augments it on the device (the same view
goes to the student and to every reference), asks the reference logit sources for that batch one or
more steps ahead, and minimises the objective — the forward pass under bf16 autocast with
`precision: bf16`, the loss in fp32, through `torch.compile` with `compile`.

`run_epochs` is the one epoch machinery — resume, schedule, warm-up, the non-finite check, epoch
statistics, validation, checkpoints — for a `Stepper`: how the models of a training take a step.
`train` steps one model (`OneModel`); workers/packed.py steps m replicas as one batched model.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import torch
from torch import nn

from workers.checkpoints import ModelSettings, read_checkpoint, save_checkpoint
from workers.data import Batch, epoch_batches
from workers.data.encoded import EncodedSplit, Samples, encode
from workers.inference import Logits, ReferenceSource, predict_logits
from workers.metrics import error_rate, negative_flip_rate
from workers.objectives import Objective
from workers.runtime import autocast, use_threads

CompileMode = bool | Literal["default", "reduce-overhead", "max-autotune"]


class NonFiniteLossError(RuntimeError):
    """The loss became NaN or Inf; training stopped at `step`."""

    def __init__(self, step: int, epoch: int, value: float) -> None:
        super().__init__(f"loss is {value} at step {step} (epoch {epoch}); training stopped")
        self.step, self.epoch, self.value = step, epoch, value

    def __reduce__(self) -> tuple[Any, ...]:  # travels back from Ray workers intact
        return type(self), (self.step, self.epoch, self.value)


@dataclass(frozen=True)
class TrainConfig:
    """Optimiser, schedule and loop settings. The first fields are the spec's `train` section
    (pipelines/spec.py `TrainSpec`), same names, same meaning, its `auto` values resolved: the plan
    builds this from the section's `model_dump()`, so a spec field with no field here cannot run.
    The last four say where and how the task computes."""

    epochs: int = 10
    batch_size: int = 128
    lr: float = 0.1
    momentum: float = 0.9
    weight_decay: float = 5e-4
    schedule: Literal["cosine", "step"] = "cosine"  # step: ×0.1 at 50 % and 75 % of the epochs
    warmup_epochs: float = 0.0  # linear lr warm-up before the schedule (LDI needs it: docs/methods.md)
    seed: int = 0
    augment: bool = True  # the master switch of crop and flip
    crop: int | Literal["resized"] = 2  # random shift by up to ± this many pixels (zero padding); 0: none
    freeze: Literal["none", "backbone"] = "none"  # backbone: only the classifier head trains (jobs.freeze)
    flip: bool = True  # random horizontal flip
    max_grad_norm: float | None = 5.0  # clip the gradient norm (LDI starts large); None: no clipping
    prefetch: int = 2  # reference batches requested ahead of the step
    precision: Literal["fp32", "bf16"] = "fp32"  # bf16: the forward pass under autocast; loss, metrics fp32
    compile: CompileMode = False  # torch.compile's mode (True: "default")
    threads: int = 1  # torch intra-op threads: one per CPU the task holds
    channels_last: bool = True  # NHWC tensors for CNN steps (docs/benchmarks.md)
    device: str = "cpu"
    eval_batch_size: int = 1024

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.batch_size < 1 or self.lr <= 0 or self.prefetch < 1 or self.warmup_epochs < 0:
            raise ValueError("epochs, batch_size, prefetch must be ≥ 1, lr > 0 and warmup_epochs ≥ 0")
        if self.precision not in ("fp32", "bf16"):
            raise ValueError(f"precision must be fp32 or bf16, got {self.precision!r}")
        if not (self.crop == "resized" or (isinstance(self.crop, int) and self.crop >= 0)):
            raise ValueError(f"crop must be a number of pixels ≥ 0 or 'resized', got {self.crop!r}")
        if self.compile not in (False, True, "default", "reduce-overhead", "max-autotune"):
            raise ValueError(f"compile must be a boolean or a torch.compile mode, got {self.compile!r}")

    @property
    def augmentation(self) -> tuple[int | Literal["resized"], bool]:
        """(crop, flip) that training applies: both off without `augment`."""
        return (self.crop, self.flip) if self.augment else (0, False)


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


def class_ids(data: Samples) -> list[int]:
    """The class ids present in a training split: a model trained on it has `classes_seen` these
    (data growth: NFR against it is counted on these classes only)."""
    return sorted(int(c) for c in torch.unique(data.labels))


def sgd(parameters: Iterable[torch.Tensor], config: TrainConfig) -> torch.optim.SGD:
    """SGD with Nesterov momentum and weight decay, at the config's peak lr."""
    return torch.optim.SGD(
        list(parameters), lr=config.lr, momentum=config.momentum, weight_decay=config.weight_decay, nesterov=True
    )


def warmup_steps(config: TrainConfig, steps_per_epoch: int) -> int:
    """Steps of the linear warm-up: `warmup_epochs` of them, at most all but the run's last step."""
    return max(0, min(round(config.warmup_epochs * steps_per_epoch), config.epochs * steps_per_epoch - 1))


def lr_schedule(
    optimizer: torch.optim.Optimizer, config: TrainConfig, steps_per_epoch: int
) -> torch.optim.lr_scheduler.LRScheduler:
    """Stepped once per optimiser step: a linear warm-up from lr/W to lr over the first W steps
    (`warmup_epochs`), then cosine from lr to 0 over the rest, or ×0.1 at 50 % and 75 % of the run."""
    total, warmup = config.epochs * steps_per_epoch, warmup_steps(config, steps_per_epoch)
    schedulers = torch.optim.lr_scheduler
    after: torch.optim.lr_scheduler.LRScheduler
    if config.schedule == "cosine":
        after = schedulers.CosineAnnealingLR(optimizer, T_max=total - warmup)
    elif config.schedule == "step":
        milestones = [max(1, int(total * f) - warmup) for f in (0.5, 0.75)]
        after = schedulers.MultiStepLR(optimizer, milestones, gamma=0.1)
    else:
        raise ValueError(f"schedule must be cosine or step, got {config.schedule!r}")
    if not warmup:
        return after
    ramp = schedulers.LinearLR(optimizer, start_factor=1 / warmup, total_iters=max(1, warmup - 1))
    return schedulers.SequentialLR(optimizer, [ramp, after], milestones=[warmup])


def scoped_nfr(reference: torch.Tensor | None, logits: torch.Tensor, labels: torch.Tensor) -> float | None:
    """NFR against `reference` (the old model's class ids on these samples; -1 marks a sample of a
    class the old model never saw, left out of the count); None without a reference."""
    if reference is None:
        return None
    known = reference >= 0
    if not bool(known.any()):
        return None
    return negative_flip_rate(reference[known], logits[known], labels[known])


def compiled(module: Callable[..., torch.Tensor], mode: CompileMode) -> Callable[..., torch.Tensor]:
    """`torch.compile(module)` in `mode` (True: "default"), or the module itself; a compiled
    module shares the model's parameters, so checkpoints and evaluation use the plain model."""
    if not mode:
        return module
    return torch.compile(module, mode="default" if mode is True else mode)


def batches(data: Samples, config: TrainConfig, epoch: int) -> Iterator[Batch]:
    """The epoch's plan: a permutation seeded by (seed, epoch) and its augmentation draws, so a
    resumed run — on any device — sees the same batches."""
    crop, flip = config.augmentation
    resized = crop == "resized"
    padding = 0 if crop == "resized" else crop
    augment = resized or padding > 0 or flip
    return epoch_batches(len(data), config.batch_size, config.seed, epoch, augment, padding, flip, resized)


SYNC_EVERY = 32  # steps between the loop's checks for a non-finite loss (each check waits for the device)


class Stepper(Protocol):
    """How the models of one training take their steps: `OneModel`, or m replicas as one batched
    model (workers/packed.py `PackedModels`). `run_epochs` does everything else."""

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


def run_epochs(
    stepper: Stepper,
    members: Sequence[Member],
    data: Samples,
    val: Samples | None = None,
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
    config, k = members[0].config, len(members)
    device = torch.device(config.device)
    steps_per_epoch = math.ceil(len(data) / config.batch_size)
    scheduler = lr_schedule(stepper.optimizer, config, steps_per_epoch)
    results = [TrainResult(model) for model in stepper.models()]
    _restore(stepper, scheduler, members, results)
    classes = class_ids(data)
    val_inputs = None if val is None else encode(val, settings.inputs if settings is not None else None)
    rank, world = shard
    for epoch in range(results[0].resumed_from, config.epochs):
        started, seen = time.perf_counter(), 0
        # per-step figures stay on the device: no host sync inside the loop but every SYNC_EVERY steps
        loss_sum = torch.zeros(k, device=device)
        clipped = torch.zeros(k, dtype=torch.long, device=device)
        first_bad = torch.zeros((), dtype=torch.long, device=device)  # first non-finite step (0: none)
        bad_loss = torch.zeros((), device=device)
        groups: Iterator[Sequence[Batch]] = zip(*(batches(data, m.config, epoch) for m in members))
        if world > 1:
            groups = ([batch.shard(rank, world) for batch in group] for group in groups)
        for step, (losses, was_clipped, n) in enumerate(stepper.epoch(groups), 1):
            scheduler.step()
            for result in results:
                result.steps += 1
                result.steps_run += 1
            finite = torch.isfinite(losses)
            now_bad = (first_bad == 0) & ~finite.all()
            first_bad = torch.where(now_bad, results[0].steps, first_bad)
            bad_loss = torch.where(now_bad, losses[torch.argmin(finite.int())], bad_loss)
            loss_sum += losses * n
            clipped += was_clipped
            seen += n
            if step % SYNC_EVERY == 0 or step == steps_per_epoch:
                if int(first_bad.item()):
                    raise NonFiniteLossError(int(first_bad.item()), epoch, bad_loss.item())
            for member in members:
                if member.on_step is not None:
                    member.on_step(epoch + 1, step, steps_per_epoch)
        seconds = time.perf_counter() - started
        lr = stepper.optimizer.param_groups[0]["lr"]
        models = stepper.models()
        saving = any(m.checkpoint_path is not None for m in members)
        optimizer_states = stepper.optimizer_states() if saving else [{}] * k
        for r, (member, model, result) in enumerate(zip(members, models, results)):
            stats = EpochStats(
                epoch=epoch + 1,
                loss=loss_sum[r].item() / seen,
                lr=lr,
                seconds=seconds,
                samples_per_second=seen / seconds,
                clipped_fraction=clipped[r].item() / steps_per_epoch,
            )
            if val is not None and val_inputs is not None:
                logits = predict_logits(model, val_inputs, config.eval_batch_size, device)
                stats.val_error_rate = error_rate(logits, val.labels)
                stats.val_nfr = scoped_nfr(member.val_reference, logits, val.labels)
            result.history.append(stats)
            result.epochs_run += 1
            if member.checkpoint_path is not None and settings is not None:
                save_checkpoint(
                    member.checkpoint_path,
                    model,
                    settings,
                    classes_seen=classes,
                    classes=list(data.classes),
                    optimizer=optimizer_states[r],
                    scheduler=scheduler.state_dict(),
                    epoch=epoch + 1,
                    steps=result.steps,
                    history=[asdict(h) for h in result.history],
                    config=asdict(member.config),
                )
            if member.on_epoch is not None:
                member.on_epoch(stats)
    return results


def _with_references(
    stream: Iterator[tuple[Batch, torch.Tensor]], references: ReferenceSource | None, depth: int
) -> Iterator[tuple[Batch, torch.Tensor, Callable[[], Mapping[str, Logits]]]]:
    """Yield each (batch, inputs) with its pending reference request, `depth` batches requested ahead."""
    if references is None:
        yield from ((batch, inputs, dict) for batch, inputs in stream)
        return
    pending: deque[tuple[Batch, torch.Tensor, Callable[[], Mapping[str, Logits]]]] = deque()
    for batch, inputs in stream:
        pending.append((batch, inputs, references.request(inputs, batch)))
        if len(pending) > depth:
            yield pending.popleft()
    yield from pending


class OneModel:
    """A `Stepper` of one model (DistributedDataParallel-wrapped for data parallelism) minimising
    `objective` with reference logits from `references`, requested `config.prefetch` steps ahead."""

    def __init__(
        self,
        model: nn.Module,
        data: EncodedSplit,
        targets: torch.Tensor,
        config: TrainConfig,
        objective: Objective,
        references: ReferenceSource | None,
    ) -> None:
        self.config, self.objective, self.references = config, objective, references
        self.device = torch.device(config.device)
        self.memory_format = torch.channels_last if config.channels_last else torch.contiguous_format
        self.plain = model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model
        if self.plain is model:  # a DDP-wrapped model was placed before it was wrapped
            model.to(self.device, memory_format=self.memory_format)  # type: ignore[call-overload]  # torch stubs lack (device, memory_format)
        self.model = model
        self.forward = compiled(model, config.compile)
        self.data, self.targets = data.to(self.device), targets.to(self.device)  # the split lives on the device
        self.optimizer: torch.optim.Optimizer = sgd(model.parameters(), config)

    def _view(self, batch: Batch) -> torch.Tensor:
        inputs = self.data.batch(batch)
        return inputs.contiguous(memory_format=self.memory_format) if inputs.dim() == 4 else inputs

    def restore(self, states: Sequence[Mapping[str, Any]]) -> None:
        self.plain.load_state_dict(states[0]["state_dict"])
        self.optimizer.load_state_dict(states[0]["optimizer"])

    def epoch(self, groups: Iterator[Sequence[Batch]]) -> Iterator[tuple[torch.Tensor, torch.Tensor, int]]:
        self.model.train()
        config = self.config
        views = ((group[0], self._view(group[0])) for group in groups)
        no_clip = torch.zeros(1, dtype=torch.long, device=self.device)
        for batch, inputs, pending in _with_references(views, self.references, config.prefetch):
            labels = self.targets[batch.indices.to(self.device, torch.long)]
            with autocast(self.device, config.precision):
                student = self.forward(inputs)
            refs = {name: logits.to(self.device) for name, logits in pending().items()}
            loss = self.objective(student.float(), labels, refs)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            clipped = no_clip
            if config.max_grad_norm is not None:
                norm = nn.utils.clip_grad_norm_(self.model.parameters(), config.max_grad_norm)
                clipped = (norm > config.max_grad_norm).long().view(1)
            self.optimizer.step()
            yield loss.detach().view(1), clipped, len(labels)

    def models(self) -> list[nn.Module]:
        return [self.plain]

    def optimizer_states(self) -> list[dict[str, Any]]:
        return [self.optimizer.state_dict()]


def train(
    model: nn.Module,
    data: Samples,
    config: TrainConfig,
    objective: Objective | None = None,
    references: ReferenceSource | None = None,
    val: Samples | None = None,
    settings: ModelSettings | None = None,
    checkpoint_path: str | Path | None = None,
    on_epoch: Callable[[EpochStats], None] | None = None,
    on_step: Callable[[int, int, int], None] | None = None,
    val_reference: torch.Tensor | None = None,
    shard: tuple[int, int] = (0, 1),
) -> TrainResult:
    """Train `model` in place on `data` and return it with per-epoch statistics.

    `references` serves the logits named in `objective.references` ("teacher", "old").
    With `checkpoint_path` (and `settings`), a checkpoint is written at each epoch end, and an
    existing one is resumed from (model, optimizer, schedule and epoch). `on_step(epoch, step,
    steps_per_epoch)` follows progress inside an epoch; with `val_reference` (the old model's class
    ids on `val`, -1 outside its classes) each epoch also records the validation NFR against it.

    Data parallel (`shard` = (rank, world), `model` wrapped by DistributedDataParallel): each step
    this process trains samples rank, rank + world, … of the step's batch; DDP averages the
    gradients, so `world` processes take the steps one process would with the whole batch.
    Checkpoints and evaluation use the wrapped module.
    """
    objective = objective or Objective("none")
    missing = [name for name in objective.references if name not in (references.names if references else ())]
    if missing:
        raise ValueError(f"method {objective.method!r} needs reference logits: {', '.join(missing)}")
    use_threads(config.threads)
    encoded = encode(data, settings.inputs if settings is not None else None)
    stepper = OneModel(model, encoded, data.labels, config, objective, references)
    member = Member(config, checkpoint_path, val_reference, on_epoch, on_step)
    return run_epochs(stepper, [member], data, val, settings, shard)[0]
