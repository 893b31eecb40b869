"""Where a version's model starts: the spec's `init`, applied to replicas, student and plain training.

- a torchvision weights name (`IMAGENET1K_V1`, `DEFAULT`) of `arch` resnet18/34/50, read from
  torchvision's own cache (`torch.hub.get_dir()/checkpoints`; nothing is downloaded at run time);
- a state_dict file (`.pt`, `.pth`: read with `weights_only`; `.safetensors`), or a Congruent
  checkpoint, whose `state_dict` is taken;
- `old` (the deployed version's own weights) is resolved by the plan to the old checkpoint and loaded
  by `workers.tasks.resolve.initial_model` as BCWI's fine-tuning is: same architecture, strictly.

`load_weights` matches the file's keys to the model's. The classifier head (`head_modules`: what
the architecture names its classifier) keeps its fresh initialisation when its shape differs (another class count); for
resnet18/34/50 so does the first convolution, which Congruent's ResNets replace by a 3×3
stride-1 stem for small images. Every other missing, unexpected or mis-shaped key is an `InitError`
that lists them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import torch
from torch import nn

from workers.errors import first_line
from workers.models.checkpoints import load_weights_only
from workers.names import is_weights_file

TORCHVISION_ARCHS = ("resnet18", "resnet34", "resnet50")  # the built-in archs torchvision has weights for
STEM = ("conv1.weight",)  # torchvision ResNets' 7×7 stride-2 stem; Congruent's is 3×3 stride 1


class InitError(ValueError):
    """Starting weights that cannot be used; the message names the source and the problem."""


def torchvision_weights(arch: str, name: str) -> Any:  # a torchvision WeightsEnum member
    """The torchvision weights `name` of `arch` (e.g. ResNet18_Weights.IMAGENET1K_V1)."""
    from torchvision.models import get_model_weights

    if arch not in TORCHVISION_ARCHS:
        raise InitError(f"init: {name} names torchvision weights; only arch {', '.join(TORCHVISION_ARCHS)} has them")
    weights = get_model_weights(arch)
    try:
        return weights[name]
    except KeyError:
        known = ", ".join(dict.fromkeys(["DEFAULT", *weights.__members__]))
        raise InitError(f"init: {arch} has no torchvision weights {name!r} (known: {known})") from None


def torchvision_file(arch: str, name: str) -> Path:
    """Where torchvision keeps the file of weights `name` (its cache; `TORCH_HOME` moves it)."""
    weights = torchvision_weights(arch, name)
    return Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(urlparse(weights.url).path)


def check_available(arch: str, init: str) -> None:
    """InitError (one line) unless the starting weights can be read here without a network."""
    if init == "old":
        return
    if is_weights_file(init):
        if not Path(init).is_file():
            raise InitError(f"init: {init}: no such file")
        return
    path = torchvision_file(arch, init)
    if not path.is_file():
        url = torchvision_weights(arch, init).url
        raise InitError(
            f"init: {arch} {init} needs torchvision's file {path.name} in {path.parent} and there is no "
            f"network here: download {url} on a connected machine and copy it there"
        )


def pretrained_normalisation(arch: str, name: str, channels: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(mean, std) per channel the weights were trained with (their own transforms); greyscale
    input reads the mean over the three channels."""
    transforms = torchvision_weights(arch, name).transforms()
    mean, std = tuple(float(v) for v in transforms.mean), tuple(float(v) for v in transforms.std)
    if channels == 1:
        return (sum(mean) / 3,), (sum(std) / 3,)
    return mean, std


def read_state_dict(source: str) -> dict[str, torch.Tensor]:
    """The tensors of a state_dict file (or a checkpoint holding a `state_dict`)."""
    path = Path(source)
    state: Any
    try:
        if path.suffix.lower() == ".safetensors":
            from safetensors.torch import load_file

            state = load_file(str(path))
        else:
            state = load_weights_only(path)
    except FileNotFoundError:
        raise InitError(f"init: {source}: no such file") from None
    except Exception as e:  # noqa: BLE001 - torch and safetensors raise many types for foreign files
        raise InitError(f"init: {source}: not a readable state_dict ({type(e).__name__}: {first_line(e)})") from None
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise InitError(f"init: {source}: not a state_dict (a mapping of parameter names to tensors)")
    return {str(k).removeprefix("module."): v for k, v in state.items()}  # DDP-saved files prefix `module.`


def head_modules(model: nn.Module) -> tuple[str, ...]:
    """The names of the modules the architecture calls its classifier head: the model's own
    `head_modules` (`hf:DIR`: every module of the transformers model outside its base model, e.g.
    BERT's classifier, DistilBERT's pre_classifier and classifier), its `head` (the text models) or
    `fc` (torchvision's ResNets), else its last `nn.Linear` (the sequential built-ins, user factories)."""
    declared = getattr(model, "head_modules", None)
    if declared:
        return tuple(declared)
    for name in ("head", "fc"):
        if isinstance(getattr(model, name, None), nn.Module):
            return (name,)
    linear = [name for name, module in model.named_modules() if isinstance(module, nn.Linear)]
    if not linear:
        raise InitError(f"{type(model).__name__} has no nn.Linear layer to treat as its classifier head")
    return (linear[-1],)


def in_head(name: str, heads: tuple[str, ...]) -> bool:
    """Whether the parameter, buffer or module `name` belongs to one of the head modules `heads`."""
    return any(name == head or name.startswith(head + ".") for head in heads)


@dataclass(frozen=True)
class InitReport:
    """What `load_weights` did: how many tensors it loaded and which keys kept their fresh values."""

    loaded: int
    fresh: tuple[str, ...]


def _listing(kind: str, keys: list[str]) -> str:
    shown = ", ".join(keys[:6]) + (f", … ({len(keys)} in all)" if len(keys) > 6 else "")
    return f"{kind}: {shown}"


def load_weights(model: nn.Module, state: dict[str, torch.Tensor], source: str, stem_may_differ: bool) -> InitReport:
    """Load `state` into `model` in place. The head's keys (and, with `stem_may_differ`, the stem's)
    keep the model's values where their shapes differ; any other mismatch is an InitError naming
    the missing keys, the unexpected ones and the mis-shaped ones."""
    own = model.state_dict()
    heads = head_modules(model)
    may_differ = {k for k in own if in_head(k, heads)} | (set(STEM) if stem_may_differ else set())
    mismatched = [k for k in own if k in state and state[k].shape != own[k].shape]
    fresh = [k for k in mismatched if k in may_differ]
    missing = [k for k in own if k not in state and not k.endswith("num_batches_tracked")]
    unexpected = [k for k in state if k not in own]
    wrong = [f"{k} {tuple(state[k].shape)} for {tuple(own[k].shape)}" for k in mismatched if k not in may_differ]
    problems = [
        _listing(kind, keys)
        for kind, keys in (("missing", missing), ("unexpected", unexpected), ("wrong shape", wrong))
        if keys
    ]
    if problems:
        raise InitError(f"init: {source} does not fit this model ({'; '.join(problems)})")
    usable = {k: v for k, v in state.items() if k not in fresh}
    model.load_state_dict(usable, strict=False)
    return InitReport(len(usable), tuple(fresh))


def initialise(model: nn.Module, arch: str, init: str) -> InitReport:
    """Load the starting weights `init` (a torchvision weights name or a state_dict file) into
    `model`, built for `arch`."""
    if is_weights_file(init):  # a torchvision ResNet's own file may carry the 7×7 stem too
        return load_weights(model, read_state_dict(init), init, stem_may_differ=arch in TORCHVISION_ARCHS)
    check_available(arch, init)  # the cached file is there: torchvision's own loader reads it, no download
    state = torchvision_weights(arch, init).get_state_dict(progress=False)
    return load_weights(model, state, f"{arch} {init}", stem_may_differ=True)


def freeze_backbone(model: nn.Module) -> int:
    """`train.freeze: backbone`: every parameter but the classifier head's (`head_modules`) stops
    training (requires_grad False; the optimiser skips parameters without gradients, weight decay
    included), and every module of the backbone runs in eval mode even while the model trains — its
    dropout off, its BatchNorm layers normalising with their running statistics and never updating
    them — so the backbone computes exactly the features of the model it started from. Returns the
    trainable parameter count."""
    heads = head_modules(model)
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(in_head(name, heads))
    for name, module in model.named_modules():
        holds_head = any(head.startswith(name + ".") for head in heads) or name == ""  # the head's ancestors
        if not holds_head and not in_head(name, heads):
            module.register_forward_pre_hook(_in_eval_mode)
    return trainable_parameters(model)


def _in_eval_mode(module: nn.Module, _: object) -> None:
    """Forward pre-hook: the module runs as in eval mode whatever `model.train()` set."""
    module.training = False


def trainable_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
