"""Adapter teachers on one frozen base: m LoRA replicas of one `hf:` model (`train.adapter`) differ
only in their adapters and heads, so they are held as one base, m adapters and m heads, and their
forward is one pass over the batch repeated m times, the i-th copy through the i-th adapter and head
(instead of m models, m forwards, m copies of the base in memory).

Every LoRA layer computes, for the i-th copy x_i of the batch, W x_i + (α/r) · B_i A_i x_i (Hu et al.
2022), W the base's: one matmul of W over all m copies and a batched one of the adapters; the head
module i reads copy i only. The mean over the copies is the ensemble's φ_ens(x) = (1/m) Σ_i φ^(i)(x).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from workers.models.adapters import ADAPTER_MARK


def _lora_layers(model: nn.Module) -> dict[str, Any]:
    """peft's LoRA-wrapped layers of `model` by name: a `base_layer` and `lora_A` / `lora_B` dicts."""
    return {
        name: module
        for name, module in model.named_modules()
        if hasattr(module, "base_layer") and hasattr(module, "lora_A") and hasattr(module, "lora_B")
    }


def shares_one_base(models: Sequence[nn.Module]) -> bool:
    """Whether `models` are ≥ 2 adapter models (LoRA, one adapter each, no DoRA or adapter bias) of one
    architecture whose every weight outside the adapters and the heads (`head_modules`) is equal."""
    if len(models) < 2 or not all(hasattr(m, "head_modules") and _lora_layers(m) for m in models):
        return False
    heads = tuple(f"{name}." for name in getattr(models[0], "head_modules"))  # noqa: B009  (HfClassifier's)
    for layer in _lora_layers(models[0]).values():
        if list(layer.lora_A) != ["default"] or getattr(layer, "use_dora", {}).get("default", False):
            return False
        if layer.lora_B["default"].bias is not None:
            return False

    def shared(model: nn.Module) -> dict[str, torch.Tensor]:
        tensors = [*model.named_parameters(), *model.named_buffers()]
        return {n: t for n, t in tensors if ADAPTER_MARK not in n and not n.startswith(heads)}

    first = shared(models[0])
    for model in models[1:]:
        other = shared(model)
        if other.keys() != first.keys() or not all(torch.equal(other[n], t) for n, t in first.items()):
            return False
    return True


class RoutedLora(nn.Module):
    """A LoRA layer of m adapters: input (m·N)×…×in, the i-th of its m equal chunks through adapter
    i: y = W x + s · (x A_iᵀ) B_iᵀ (eval mode: no dropout)."""

    a: torch.Tensor
    b: torch.Tensor

    def __init__(self, base: nn.Module, a: torch.Tensor, b: torch.Tensor, scaling: float) -> None:
        super().__init__()
        self.base = base
        self.register_buffer("a", a)  # m × r × in
        self.register_buffer("b", b)  # m × out × r
        self.scaling = scaling

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.base(x)
        m = self.a.shape[0]
        chunks = x.reshape(m, -1, x.shape[-1]).to(self.a.dtype)
        delta = torch.bmm(torch.bmm(chunks, self.a.transpose(1, 2)), self.b.transpose(1, 2))
        return y + (self.scaling * delta).reshape(y.shape).to(y.dtype)


class RoutedHead(nn.Module):
    """m head modules: the i-th of the input's m equal chunks (along the batch) through head i."""

    def __init__(self, heads: Sequence[nn.Module]) -> None:
        super().__init__()
        self.heads = nn.ModuleList(heads)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([head(chunk) for head, chunk in zip(self.heads, x.chunk(len(self.heads)), strict=True)])


class SharedBaseTeachers(nn.Module):
    """The mean logits of m adapter models that `shares_one_base`: one copy of the base, its LoRA
    layers `RoutedLora` and its head modules `RoutedHead` over the batch repeated m times."""

    def __init__(self, models: Sequence[nn.Module]) -> None:
        super().__init__()
        self.m = len(models)
        self.model = copy.deepcopy(models[0])
        for name, layer in _lora_layers(self.model).items():
            found = [_lora_layers(model)[name] for model in models]
            a = torch.stack([f.lora_A["default"].weight.detach() for f in found])
            b = torch.stack([f.lora_B["default"].weight.detach() for f in found])
            routed = RoutedLora(layer.base_layer, a, b, float(layer.scaling["default"]))
            self.model.set_submodule(name, routed)
        for name in getattr(self.model, "head_modules"):  # noqa: B009  (HfClassifier's)
            self.model.set_submodule(name, RoutedHead([copy.deepcopy(m.get_submodule(name)) for m in models]))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        logits = self.model(ids.repeat(self.m, *([1] * (ids.dim() - 1))))
        return logits.float().reshape(self.m, len(ids), -1).mean(0)
