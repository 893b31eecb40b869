"""The teacher: frozen models that serve reference logits for a batch (a plain class; the driver
runs it as a Ray actor, orchestrator/driver/pool.py).

A `TeacherActor` loads every group of checkpoints it is given — e.g. {"teacher": the m replicas,
"old": the deployed model} — and answers `logits(batch)` with each group's mean logits, or, for a
group served as top-K, only the K largest values and their class indices.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from workers.checkpoints import load_model
from workers.inference import FrozenModels
from workers.losses import TopKLogits
from workers.storage import fetch_checkpoint

Answer = dict[str, np.ndarray | tuple[np.ndarray, np.ndarray]]


class TeacherActor:
    """Holds groups of frozen models (eval mode, no gradients) and serves their mean logits."""

    def __init__(
        self, groups: Mapping[str, Sequence[str]], threads: int = 1, device: str = "cpu",
        allow_user_factories: bool = False,
    ) -> None:
        torch.set_num_threads(threads)
        self.groups = {
            name: FrozenModels([load_model(fetch_checkpoint(uri), allow_user_factories)[0] for uri in uris], device)
            for name, uris in groups.items()
        }
        self.batches_served = 0

    def logits(
        self, inputs: np.ndarray, topk: Mapping[str, int] | None = None, names: Sequence[str] | None = None
    ) -> Answer:
        """{group: B×C mean logits} or, for groups in `topk`, (B×K values, B×K int32 class indices);
        only the groups in `names` when given."""
        topk = topk or {}
        x = torch.from_numpy(np.array(inputs))  # object-store arrays are read-only: copy
        out: Answer = {}
        for name, models in self.groups.items():
            if names is not None and name not in names:
                continue
            logits = models(x).cpu()
            if name in topk:
                top = TopKLogits.of(logits, topk[name])
                out[name] = (top.values.numpy(), top.indices.numpy())
            else:
                out[name] = logits.numpy()
        self.batches_served += 1
        return out

    def info(self) -> dict[str, int]:
        return {"pid": os.getpid(), "batches_served": self.batches_served}
