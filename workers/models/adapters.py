"""LoRA adapters on an `hf:DIR` model (Hu et al. 2022), injected with `peft`.

Each target linear layer W (by the last part of its module name, e.g. BERT's `query`, `value`)
computes W x + (alpha / rank) · B A x, A rank×in (Kaiming-uniform), B out×rank (zeros: training starts
from the pretrained function). Only A, B and the classifier head train; every pretrained weight is
frozen. The model stays an `HfClassifier` with the same forward; its state_dict names each wrapped
layer's weights `….base_layer.weight` and the adapter's `….lora_A.default.weight` /
`….lora_B.default.weight`, so a checkpoint holds base and adapter together, unmerged, and a model
built from the same settings loads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from workers.errors import first_line

ADAPTER_MARK = ".lora_"  # in the names of an adapter's parameters


class AdapterError(ValueError):
    """Adapter settings that do not fit the model (a target no layer has, an arch that is not hf:)."""


@dataclass(frozen=True)
class LoraSettings:
    """A LoRA adapter: rank r, scale alpha / r, the layers it updates, dropout on their input."""

    rank: int = 8
    alpha: int = 16
    targets: tuple[str, ...] = ("query", "value")
    dropout: float = 0.1

    @staticmethod
    def from_record(record: dict[str, Any] | None) -> LoraSettings | None:
        """From a spec's `train.adapter` or a checkpoint's record (its `kind` is always lora)."""
        if record is None:
            return None
        return LoraSettings(
            int(record["rank"]), int(record["alpha"]), tuple(record["targets"]), float(record["dropout"])
        )

    @property
    def summary(self) -> str:
        """`lora r8 α16 query,value`: the registry tag of a version trained with it."""
        return f"lora r{self.rank} α{self.alpha} {','.join(self.targets)}"


def attach_lora(model: nn.Module, lora: LoraSettings) -> nn.Module:
    """`model` (an HfClassifier) with LoRA layers injected in place into its transformers model;
    only the adapter and the classification head (`head_modules`) keep requires_grad. The adapter's
    random A comes from the global RNG (callers seed it)."""
    from peft import LoraConfig, inject_adapter_in_model

    inner = getattr(model, "model", None)
    if inner is None or not hasattr(model, "head_modules"):
        raise AdapterError(f"LoRA adapters are for hf:DIR models, not {type(model).__name__}")
    config = LoraConfig(
        r=lora.rank, lora_alpha=lora.alpha, target_modules=list(lora.targets), lora_dropout=lora.dropout
    )
    try:
        inject_adapter_in_model(config, inner)
    except ValueError as e:  # peft: "Target modules {...} not found in the base model"
        raise AdapterError(f"train.adapter.targets: {first_line(e)}") from None
    head_modules: tuple[str, ...] = getattr(model, "head_modules")  # noqa: B009  (an HfClassifier's property)
    heads = tuple(f"{name}." for name in head_modules)
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(ADAPTER_MARK in name or name.startswith(heads))
    return model


def adapter_parameters(model: nn.Module) -> dict[str, torch.Tensor]:
    """The adapter's own weights (A and B of every wrapped layer), by name."""
    return {name: p.detach() for name, p in model.named_parameters() if ADAPTER_MARK in name}
