"""The training loop every stage runs: plain PyTorch, no Ray inside.

    model = build_model("small-cnn", 10, seed=0)
    result = train(model, splits.train, TrainConfig(epochs=5), Objective("fd-lm"),
                   references=LocalReferences(old=FrozenModels([old_model])), val=splits.val)

SGD with momentum and a cosine or step schedule. The training split is moved to the training
device once (uint8); each step takes a batch from the epoch's seeded plan (workers/data/batches.py),
gathers and augments it on the device (the same view goes to the student and to every reference),
asks the reference logit sources for that batch one or more steps ahead, and minimises the
objective — the forward pass under bf16 autocast with `precision: bf16`, the loss in fp32, through
`torch.compile` with `compile`. A non-finite loss stops the run with the step number. Checkpoints
(`checkpoint_path`) are written at each epoch end and hold what a resumed run needs.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

import torch
from torch import nn

from workers.checkpoints import ModelSettings, read_checkpoint, save_checkpoint
from workers.data import Batch, ImageSet, batch_inputs, epoch_batches
from workers.inference import Logits, ReferenceSource, predict_logits
from workers.metrics import error_rate, negative_flip_rate
from workers.objectives import Objective


class NonFiniteLossError(RuntimeError):
    """The loss became NaN or Inf; training stopped at `step`."""

    def __init__(self, step: int, epoch: int, value: float) -> None:
        super().__init__(f"loss is {value} at step {step} (epoch {epoch}); training stopped")
        self.step, self.epoch, self.value = step, epoch, value

    def __reduce__(self):  # travels back from Ray workers intact
        return type(self), (self.step, self.epoch, self.value)


@dataclass(frozen=True)
class TrainConfig:
    """Optimiser, schedule and loop settings (defaults in one place)."""

    epochs: int = 10
    batch_size: int = 128
    lr: float = 0.1
    momentum: float = 0.9
    weight_decay: float = 5e-4
    schedule: Literal["cosine", "step"] = "cosine"  # step: ×0.1 at 50 % and 75 % of the epochs
    warmup_epochs: float = 0.0  # linear lr warm-up before the schedule (LDI needs it: docs/methods.md)
    seed: int = 0
    augment: bool = True
    augment_padding: int = 2
    augment_flip: bool = True
    max_grad_norm: float | None = 5.0  # clip the gradient norm (LDI starts large); None: no clipping
    prefetch: int = 2  # reference batches requested ahead of the step
    threads: int = 1  # torch intra-op threads; more than the cores held slows training down
    channels_last: bool = True  # NHWC tensors: faster CNN steps on CPU and GPU (benchmarks.gpu_throughput)
    device: str = "cpu"
    eval_batch_size: int = 1024
    precision: Literal["fp32", "bf16"] = "fp32"  # bf16: the forward pass under autocast; loss, metrics fp32
    compile: bool | Literal["default", "reduce-overhead", "max-autotune"] = False  # torch.compile's mode

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.batch_size < 1 or self.lr <= 0 or self.prefetch < 1 or self.warmup_epochs < 0:
            raise ValueError("epochs, batch_size, prefetch must be ≥ 1, lr > 0 and warmup_epochs ≥ 0")
        if self.precision not in ("fp32", "bf16"):
            raise ValueError(f"precision must be fp32 or bf16, got {self.precision!r}")


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


def warmup_steps(config: TrainConfig, steps_per_epoch: int) -> int:
    """Steps of the linear warm-up: `warmup_epochs` of them, at most all but the run's last step."""
    return max(0, min(round(config.warmup_epochs * steps_per_epoch), config.epochs * steps_per_epoch - 1))


def _schedule(optimizer: torch.optim.Optimizer, config: TrainConfig, steps_per_epoch: int):
    """Stepped once per optimiser step: a linear warm-up from lr/W to lr over the first W steps
    (`warmup_epochs`), then cosine from lr to 0 over the rest, or ×0.1 at 50 % and 75 % of the run."""
    total, warmup = config.epochs * steps_per_epoch, warmup_steps(config, steps_per_epoch)
    lr_scheduler = torch.optim.lr_scheduler
    if config.schedule == "cosine":
        after = lr_scheduler.CosineAnnealingLR(optimizer, T_max=total - warmup)
    elif config.schedule == "step":
        milestones = [max(1, int(total * f) - warmup) for f in (0.5, 0.75)]
        after = lr_scheduler.MultiStepLR(optimizer, milestones, gamma=0.1)
    else:
        raise ValueError(f"schedule must be cosine or step, got {config.schedule!r}")
    if not warmup:
        return after
    ramp = lr_scheduler.LinearLR(optimizer, start_factor=1 / warmup, total_iters=max(1, warmup - 1))
    return lr_scheduler.SequentialLR(optimizer, [ramp, after], milestones=[warmup])


SYNC_EVERY = 32  # steps between the loop's checks for a non-finite loss (each check waits for the device)


def _raise_if_non_finite(first_bad: torch.Tensor, bad_loss: torch.Tensor, epoch: int) -> None:
    step = int(first_bad.item())
    if step:
        raise NonFiniteLossError(step, epoch, bad_loss.item())


def classes_seen(data: ImageSet) -> list[int]:
    """The class ids present in a training split: what a model trained on it knows (data growth:
    NFR against it is counted on these classes only)."""
    return sorted(int(c) for c in torch.unique(data.labels))


def scoped_nfr(reference: torch.Tensor | None, logits: torch.Tensor, labels: torch.Tensor) -> float | None:
    """NFR against `reference` (the old model's class ids on these samples; -1 marks a sample of a
    class the old model never saw, left out of the count); None without a reference."""
    if reference is None:
        return None
    known = reference >= 0
    if not bool(known.any()):
        return None
    return negative_flip_rate(reference[known], logits[known], labels[known])


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """bf16 autocast on `device` for `precision` "bf16", else nothing."""
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def compiled(model: nn.Module, mode: bool | str) -> nn.Module:
    """`torch.compile(model)` in `mode` (True: "default"), or the model itself; the compiled module
    shares the model's parameters, so checkpoints and evaluation use the plain model."""
    if not mode:
        return model
    return torch.compile(model, mode="default" if mode is True else mode)


def batches(data: ImageSet, config: TrainConfig, epoch: int) -> Iterator[Batch]:
    """The epoch's plan: a permutation seeded by (seed, epoch) and its augmentation draws, so a
    resumed run — on any device — sees the same batches."""
    return epoch_batches(len(data), config.batch_size, config.seed, epoch, config.augment,
                         config.augment_padding, config.augment_flip)


def _with_references(
    stream: Iterator[tuple[Batch, torch.Tensor]], references: ReferenceSource | None, depth: int
) -> Iterator[tuple[Batch, torch.Tensor, Callable[[], Mapping[str, Logits]]]]:
    """Yield each (batch, inputs) with its pending reference request, `depth` batches requested ahead."""
    if references is None:
        yield from ((batch, inputs, dict) for batch, inputs in stream)
        return
    pending: deque = deque()
    for batch, inputs in stream:
        pending.append((batch, inputs, references.request(inputs, batch)))
        if len(pending) > depth:
            yield pending.popleft()
    yield from pending


def train(
    model: nn.Module,
    data: ImageSet,
    config: TrainConfig,
    objective: Objective | None = None,
    references: ReferenceSource | None = None,
    val: ImageSet | None = None,
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
    if checkpoint_path is not None and settings is None:
        raise ValueError("checkpoint_path needs the model settings")
    torch.set_num_threads(config.threads)
    device = torch.device(config.device)
    memory_format = torch.channels_last if config.channels_last else torch.contiguous_format
    plain = model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model
    if plain is model:  # a DDP-wrapped model was placed before it was wrapped
        model.to(device, memory_format=memory_format)
    rank, world = shard
    images, targets = data.images.to(device), data.labels.to(device)  # the split lives on the device
    optimizer = torch.optim.SGD(
        model.parameters(), lr=config.lr, momentum=config.momentum, weight_decay=config.weight_decay, nesterov=True
    )
    steps_per_epoch = math.ceil(len(data) / config.batch_size)
    scheduler = _schedule(optimizer, config, steps_per_epoch)
    result = TrainResult(plain)
    first_epoch = 0
    if checkpoint_path is not None and Path(checkpoint_path).exists():
        state = read_checkpoint(checkpoint_path)
        plain.load_state_dict(state["state_dict"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        first_epoch, result.steps = state["epoch"], state["steps"]
        result.resumed_from = first_epoch
        result.history = [EpochStats(**h) for h in state["history"]]
    forward = compiled(model, config.compile)
    for epoch in range(first_epoch, config.epochs):
        model.train()
        started, seen = time.perf_counter(), 0
        # per-step figures stay on the device: no host sync inside the loop but every SYNC_EVERY steps
        loss_sum = torch.zeros((), device=device)
        clipped = torch.zeros((), dtype=torch.long, device=device)
        first_bad = torch.zeros((), dtype=torch.long, device=device)  # first non-finite step (0: none)
        bad_loss = torch.zeros((), device=device)
        plan = batches(data, config, epoch)
        if world > 1:
            plan = (batch.shard(rank, world) for batch in plan)
        views = ((batch, batch_inputs(images, batch).contiguous(memory_format=memory_format)) for batch in plan)
        for step, (batch, inputs, pending) in enumerate(_with_references(views, references, config.prefetch), 1):
            labels = targets[batch.indices.to(device, torch.long)]
            with autocast(device, config.precision):
                student = forward(inputs)
            refs = {name: logits.to(device) for name, logits in pending().items()}
            loss = objective(student.float(), labels, refs)
            result.steps += 1
            result.steps_run += 1
            now_bad = (first_bad == 0) & ~torch.isfinite(loss)
            first_bad = torch.where(now_bad, result.steps, first_bad)
            bad_loss = torch.where(now_bad, loss.detach(), bad_loss)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if config.max_grad_norm is not None:
                norm = nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
                clipped += norm > config.max_grad_norm
            optimizer.step()
            scheduler.step()
            loss_sum += loss.detach() * len(labels)
            seen += len(labels)
            if step % SYNC_EVERY == 0 or step == steps_per_epoch:
                _raise_if_non_finite(first_bad, bad_loss, epoch)
            if on_step is not None:
                on_step(epoch + 1, step, steps_per_epoch)
        seconds = time.perf_counter() - started
        stats = EpochStats(
            epoch=epoch + 1, loss=loss_sum.item() / seen, lr=optimizer.param_groups[0]["lr"], seconds=seconds,
            samples_per_second=seen / seconds, clipped_fraction=clipped.item() / steps_per_epoch,
        )
        if val is not None:
            logits = predict_logits(plain, val, config.eval_batch_size, device)
            stats.val_error_rate = error_rate(logits, val.labels)
            stats.val_nfr = scoped_nfr(val_reference, logits, val.labels)
        result.history.append(stats)
        result.epochs_run += 1
        if checkpoint_path is not None:
            save_checkpoint(
                checkpoint_path, plain, settings, classes_seen=classes_seen(data),
                optimizer=optimizer.state_dict(), scheduler=scheduler.state_dict(),
                epoch=epoch + 1, steps=result.steps, history=[asdict(h) for h in result.history],
                config=asdict(config),
            )
        if on_epoch is not None:
            on_epoch(stats)
    return result
