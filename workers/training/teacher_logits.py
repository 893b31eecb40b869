"""What the trainer reads teacher logits from.

A *logit source* gives the named logits an objective reads (`Objective.references`, the papers'
reference models: "teacher", the replica ensemble; "old", the deployed model) for the batch the
student is training on. `request(inputs, batch)` starts the work
and returns a zero-argument callable that yields {name: logits}; the trainer requests batches ahead
of its step, so a remote source (the Ray teacher pool, orchestrator/execution/pool.py, which sends only
`batch` — indices and augmentation draws — to actors holding the training split) computes while the
student trains. workers/teachers/ holds the sources themselves."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

import torch

from workers.data import Batch

Logits = torch.Tensor  # or losses.TopKLogits, from a pool that sends only the top-K


class LogitSource(Protocol):
    names: tuple[str, ...]

    def request(self, inputs: torch.Tensor, batch: Batch | None = None) -> Callable[[], Mapping[str, Logits]]: ...
