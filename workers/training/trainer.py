"""The training loop every stage runs: plain PyTorch, no Ray inside.

    model = build_model("small-cnn", 10, seed=0)
    result = train(model, splits.train, TrainConfig(epochs=5), Objective("fd-lm"),
                   references=LocalTeachers(old=FrozenModels([old_model])), val=splits.val)

SGD (Nesterov) or AdamW with a cosine or step schedule after an optional linear warm-up. The
training split is moved to the training device once (uint8); each step takes a batch from the
epoch's seeded plan (workers/data/batches.py), gathers and augments it on the device (the same view
goes to the student and to every reference), asks the reference logit sources for that batch one or
more steps ahead, and minimises the objective (with `proximal`, plus its pull toward the weights the
model started from) — the forward pass under bf16 autocast with
`precision: bf16`, the loss in fp32, through `torch.compile` with `compile`.

`train` steps one model (`OneModel`, a `Stepper`) through `run_epochs` (workers/training/epochs.py:
resume, schedule, warm-up, the non-finite check, statistics, validation, checkpoints);
workers/training/packed.py steps m replicas as one batched model through the same machinery.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from workers.data import Batch
from workers.data.split_port import BatchReader, Split
from workers.models.checkpoints import ModelSettings
from workers.runtime import autocast, use_threads
from workers.training.config import TrainConfig, compiled, make_optimizer, undecayed_names
from workers.training.epochs import EpochStats, Member, TrainResult, run_epochs
from workers.training.objectives import Objective
from workers.training.teacher_logits import Logits, LogitSource


def _with_references(
    stream: Iterator[tuple[Batch, torch.Tensor]], references: LogitSource | None, depth: int
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
        data: BatchReader,
        targets: torch.Tensor,
        config: TrainConfig,
        objective: Objective,
        references: LogitSource | None,
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
        self.optimizer: torch.optim.Optimizer = make_optimizer(
            self.plain.named_parameters(), config, undecayed_names(self.plain)
        )
        # proximal: the weights it trains and their values now, before any step or resume: the old
        # model's, which the plan starts it from (`init_from`), are what its pull holds them to
        self.pulled = [p for p in self.plain.parameters() if p.requires_grad] if objective.pulls else []
        self.anchors = [p.detach().clone() for p in self.pulled]

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
        # the distillation term's perturbed copy (train.distill_inputs): only where there is one
        perturb = config.distill_inputs if self.objective.references else None
        for batch, inputs, pending in _with_references(views, self.references, config.prefetch):
            if batch.labels is not None:  # a streamed batch carries its labels
                labels = batch.labels.to(self.device)
            else:
                labels = self.targets[batch.indices.to(self.device, torch.long)]
            with autocast(self.device, config.precision):
                # the batch and its copy in one forward pass (one per step, as DDP wants)
                both = self.forward(inputs if perturb is None else torch.cat([inputs, perturb(inputs)]))
            student, perturbed = both[: len(inputs)].float(), both[len(inputs) :].float()
            refs = {name: logits.to(self.device) for name, logits in pending().items()}
            if perturb is None:
                loss = self.objective(student, labels, refs)
            else:
                loss = self.objective.with_perturbed(student, perturbed, labels, refs)
            if self.pulled:
                loss = loss + self.objective.pull(self.pulled, self.anchors)
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
    data: Split,
    config: TrainConfig,
    objective: Objective | None = None,
    references: LogitSource | None = None,
    val: Split | None = None,
    settings: ModelSettings | None = None,
    checkpoint_path: str | Path | None = None,
    on_epoch: Callable[[EpochStats], None] | None = None,
    on_step: Callable[[int, int, int], None] | None = None,
    val_reference: torch.Tensor | None = None,
    shard: tuple[int, int] = (0, 1),
) -> TrainResult:
    """Train `model` in place on `data` (any split, held or streamed: workers/data/split_port.py) and
    return it with per-epoch statistics.

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
    inputs = settings.inputs if settings is not None else None
    encoded = data.reader(inputs)
    stepper = OneModel(model, encoded, data.labels, config, objective, references)
    member = Member(config, checkpoint_path, val_reference, on_epoch, on_step)
    return run_epochs(stepper, [member], data, val, settings, shard)[0]
