"""Inference: logits of a model over a dataset, and frozen models as logit sources for training.

A *logit source* gives reference logits (a teacher ensemble, an old model) for the batch the student
is training on. `request(x)` starts the work and returns a zero-argument callable that yields the
B×C logits; the trainer requests the next batch before it runs the current step, so a remote source
(the Ray teacher pool) computes while the student trains.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import torch
from torch import nn

from workers.data import ImageSet, to_model_input


class LogitSource(Protocol):
    def request(self, inputs: torch.Tensor) -> Callable[[], torch.Tensor]: ...


class FrozenModels:
    """Mean logits of one or more models, in eval mode without gradients, in this process:
    φ_ens(x) = (1/m) Σ_i φ^(i)(x) (the ensemble of ELODI; with one model, that model)."""

    def __init__(self, models: Sequence[nn.Module], device: str | torch.device = "cpu") -> None:
        if not models:
            raise ValueError("FrozenModels needs at least one model")
        self.device = torch.device(device)
        self.models = [m.to(self.device).eval().requires_grad_(False) for m in models]

    @torch.no_grad()
    def logits(self, inputs: torch.Tensor) -> torch.Tensor:
        inputs = inputs.to(self.device)
        total = self.models[0](inputs)
        for model in self.models[1:]:
            total = total + model(inputs)
        return total / len(self.models)

    def request(self, inputs: torch.Tensor) -> Callable[[], torch.Tensor]:
        return lambda: self.logits(inputs)


class FunctionSource:
    """Adapts a plain callable `inputs -> logits` to a logit source."""

    def __init__(self, function: Callable[[torch.Tensor], torch.Tensor]) -> None:
        self.function = function

    def request(self, inputs: torch.Tensor) -> Callable[[], torch.Tensor]:
        return lambda: self.function(inputs)


@torch.no_grad()
def predict_logits(
    model: nn.Module, data: ImageSet, batch_size: int = 1024, device: str | torch.device = "cpu"
) -> torch.Tensor:
    """N×C logits of `model` (eval mode) on every sample of `data`, in order, on the CPU."""
    was_training = model.training
    model.eval()
    chunks = []
    for start in range(0, len(data), batch_size):
        inputs = to_model_input(data.images[start : start + batch_size]).to(device)
        chunks.append(model(inputs).float().cpu())
    model.train(was_training)
    return torch.cat(chunks)
