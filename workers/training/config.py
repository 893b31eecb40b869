"""A training's settings (`TrainConfig`) and what follows from them alone: the optimiser (SGD with
Nesterov momentum, or AdamW; weight decay on every parameter or on the weights only), the
learning-rate schedule (linear warm-up, then cosine, step or linear decay) and the compiled forward
pass."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from workers.models.adapters import LoraSettings
from workers.training.perturb import DistillInputs

CompileMode = bool | Literal["default", "reduce-overhead", "max-autotune"]


@dataclass(frozen=True)
class TrainConfig:
    """Optimiser, schedule and loop settings. The first fields are the spec's `train` section
    (pipelines/spec.py `TrainSpec`), same names, same meaning, its `auto` values resolved: the plan
    builds this from the section's `model_dump()`, so a spec field with no field here cannot run.
    The last four say where and how the task computes."""

    epochs: int = 10
    batch_size: int = 128
    optimizer: Literal["sgd", "adamw"] = "sgd"
    lr: float = 0.1
    momentum: float = 0.9  # SGD only
    weight_decay: float = 5e-4
    weight_decay_on: Literal["all", "weights"] = "all"  # weights: not biases nor normalisation layers
    schedule: Literal["cosine", "step", "linear"] = "cosine"  # step: ×0.1 at 50 %, 75 %; linear: to 0
    warmup_epochs: float = 0.0  # linear lr warm-up before the schedule (LDI needs it: docs/methods.md)
    seed: int = 0
    augment: bool = True  # the master switch of crop and flip
    crop: int | Literal["resized"] = 2  # random shift by up to ± this many pixels (zero padding); 0: none
    freeze: Literal["none", "backbone"] = "none"  # backbone: only the head trains (models/starting_weights.py)
    flip: bool = True  # random horizontal flip
    max_grad_norm: float | None = 5.0  # clip the gradient norm (LDI starts large); None: no clipping
    prefetch: int = 2  # reference batches requested ahead of the step
    precision: Literal["fp32", "bf16"] = "fp32"  # bf16: the forward pass under autocast; loss, metrics fp32
    compile: CompileMode = False  # torch.compile's mode (True: "default")
    adapter: LoraSettings | None = None  # hf:DIR models: a LoRA adapter on the frozen base
    distill_inputs: DistillInputs | None = None  # a perturbed copy of each batch for the distillation term
    threads: int = 1  # torch intra-op threads: one per CPU the task holds
    channels_last: bool = True  # NHWC tensors for CNN steps (docs/benchmarks/index.md)
    device: str = "cpu"
    eval_batch_size: int = 1024

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.batch_size < 1 or self.lr <= 0 or self.prefetch < 1 or self.warmup_epochs < 0:
            raise ValueError("epochs, batch_size, prefetch must be ≥ 1, lr > 0 and warmup_epochs ≥ 0")
        if self.optimizer not in ("sgd", "adamw"):
            raise ValueError(f"optimizer must be sgd or adamw, got {self.optimizer!r}")
        if self.weight_decay_on not in ("all", "weights"):
            raise ValueError(f"weight_decay_on must be all or weights, got {self.weight_decay_on!r}")
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


NORMALISATIONS = (nn.modules.batchnorm._NormBase, nn.LayerNorm, nn.GroupNorm, nn.RMSNorm)


def undecayed_names(model: nn.Module) -> frozenset[str]:
    """Parameters that `weight_decay_on: weights` leaves undecayed: every bias, and the parameters of
    normalisation layers (BatchNorm, LayerNorm, GroupNorm, RMSNorm), as BERT's fine-tuning does
    (Devlin et al. 2019; Hugging Face's Trainer): shrinking a LayerNorm's gain or a bias toward 0 is
    no regulariser of the function's complexity."""
    names = set()
    for module_name, module in model.named_modules():
        for name, _ in module.named_parameters(recurse=False):
            if name == "bias" or name.endswith(".bias") or isinstance(module, NORMALISATIONS):
                names.add(f"{module_name}.{name}" if module_name else name)
    return frozenset(names)


def make_optimizer(
    parameters: Iterable[tuple[str, torch.Tensor]], config: TrainConfig, undecayed: Collection[str] = ()
) -> torch.optim.Optimizer:
    """The config's optimiser at its peak lr over the named `parameters`: SGD with Nesterov momentum
    and L2 weight decay, or AdamW (Loshchilov & Hutter 2019: Adam, β = (0.9, 0.999), with weight decay
    decoupled from the gradient). With `weight_decay_on: weights`, the names in `undecayed` (biases
    and norms, `undecayed_names`) form a second parameter group without weight decay."""
    named = list(parameters)
    groups: list[dict[str, object]] = [{"params": [p for _, p in named]}]
    if config.weight_decay_on == "weights" and any(name in undecayed for name, _ in named):
        groups = [
            {"params": [p for name, p in named if name not in undecayed]},
            {"params": [p for name, p in named if name in undecayed], "weight_decay": 0.0},
        ]
    if config.optimizer == "adamw":
        return torch.optim.AdamW(groups, lr=config.lr, weight_decay=config.weight_decay)
    return torch.optim.SGD(
        groups, lr=config.lr, momentum=config.momentum, weight_decay=config.weight_decay, nesterov=True
    )


def warmup_steps(config: TrainConfig, steps_per_epoch: int) -> int:
    """Steps of the linear warm-up: `warmup_epochs` of them, at most all but the run's last step."""
    return max(0, min(round(config.warmup_epochs * steps_per_epoch), config.epochs * steps_per_epoch - 1))


def lr_schedule(
    optimizer: torch.optim.Optimizer, config: TrainConfig, steps_per_epoch: int
) -> torch.optim.lr_scheduler.LRScheduler:
    """Stepped once per optimiser step: a linear warm-up from lr/W to lr over the first W steps
    (`warmup_epochs`), then cosine from lr to 0 over the rest, ×0.1 at 50 % and 75 % of the run, or
    linear from lr to 0 over the rest (BERT's fine-tuning schedule: lr·(T − t)/(T − W) at step t)."""
    total, warmup = config.epochs * steps_per_epoch, warmup_steps(config, steps_per_epoch)
    schedulers = torch.optim.lr_scheduler
    after: torch.optim.lr_scheduler.LRScheduler
    if config.schedule == "cosine":
        after = schedulers.CosineAnnealingLR(optimizer, T_max=total - warmup)
    elif config.schedule == "step":
        milestones = [max(1, int(total * f) - warmup) for f in (0.5, 0.75)]
        after = schedulers.MultiStepLR(optimizer, milestones, gamma=0.1)
    elif config.schedule == "linear":
        after = schedulers.LinearLR(optimizer, start_factor=1.0, end_factor=0.0, total_iters=total - warmup)
    else:
        raise ValueError(f"schedule must be cosine, step or linear, got {config.schedule!r}")
    if not warmup:
        return after
    ramp = schedulers.LinearLR(optimizer, start_factor=1 / warmup, total_iters=max(1, warmup - 1))
    return schedulers.SequentialLR(optimizer, [ramp, after], milestones=[warmup])


def compiled(module: Callable[..., torch.Tensor], mode: CompileMode) -> Callable[..., torch.Tensor]:
    """`torch.compile(module)` in `mode` (True: "default"), or the module itself; a compiled
    module shares the model's parameters, so checkpoints and evaluation use the plain model."""
    if not mode:
        return module
    return torch.compile(module, mode="default" if mode is True else mode)
