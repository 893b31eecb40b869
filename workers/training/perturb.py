"""Perturbed copies of a training batch for the distillation term (`train.distill_inputs`): the
student distils on more inputs than it trains on, where a set has no unlabelled rows to add."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

PERTURBATIONS = ("token-dropout",)


@dataclass(frozen=True)
class DistillInputs:
    """How the distillation term's extra copy of each batch is made: `token-dropout` masks each
    token of a text batch (not its first) as padding with probability `rate`."""

    perturb: Literal["token-dropout"] = "token-dropout"
    rate: float = 0.1

    def __post_init__(self) -> None:
        if self.perturb not in PERTURBATIONS:
            raise ValueError(f"perturb must be one of {', '.join(PERTURBATIONS)}, got {self.perturb!r}")
        if not 0.0 < self.rate < 1.0:
            raise ValueError(f"rate must lie in (0, 1), got {self.rate}")

    def __call__(self, inputs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        return token_dropout(inputs, self.rate, generator)


def token_dropout(ids: torch.Tensor, rate: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """x′_ij = 0 with probability `rate`, else x_ij, for each token id x_ij ≠ 0 at position j ≥ 1
    of a B×L batch of token ids (0 is padding, which every text model masks: a dropped token is
    gone from the model's view, Dai & Le 2015's word dropout); position 0 is kept, so no sample
    loses every token (and an hf:DIR model keeps its [CLS]). A new tensor; `ids` is left as it was."""
    if ids.dim() != 2 or ids.is_floating_point():
        raise ValueError(f"token dropout reads a B×L batch of token ids, got a {ids.dim()}-D {ids.dtype} tensor")
    draws = torch.rand(ids.shape, generator=generator, device=ids.device)
    dropped = (draws < rate) & (ids != 0)
    dropped[:, 0] = False
    return ids.masked_fill(dropped, 0)
