"""The teacher: frozen models that serve reference logits for a batch (a plain class; the driver
runs it as a Ray actor, orchestrator/driver/pool.py).

A `TeacherActor` loads every group of checkpoints it is given — e.g. {"teacher": the m replicas,
"old": the deployed model} — and answers with each group's mean logits, or, for a group served as
top-K, only the K largest values and their class indices. Holding the training split (uint8, e.g.
from Ray's object store, shared by the actors of a node: `hold_images`), it answers `logits_of(batch)` for a
`Batch` — sample indices and augmentation draws, a few bytes a sample — rebuilding the student's
very inputs itself; `logits(inputs)` takes model inputs (the eval split, the paragon).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from workers.checkpoints import load_model
from workers.data import Batch, batch_inputs
from workers.inference import FrozenModels
from workers.losses import TopKLogits
from workers.runtime import use_threads
from workers.storage import fetch_checkpoint

Answer = dict[str, np.ndarray | tuple[np.ndarray, np.ndarray]]


class TeacherActor:
    """Holds groups of frozen models (eval mode, no gradients) and serves their mean logits."""

    def __init__(
        self,
        groups: Mapping[str, Sequence[str]],
        threads: int = 1,
        device: str = "cpu",
        allow_user_factories: bool = False,
        precision: str = "fp32",
    ) -> None:
        use_threads(threads)
        self.device = torch.device(device)
        self.groups = {
            name: FrozenModels(
                [load_model(fetch_checkpoint(uri), allow_user_factories)[0] for uri in uris], device, precision
            )
            for name, uris in groups.items()
        }
        self.images: torch.Tensor | None = None  # the training split, once `hold_images` has it
        self.batches_served = 0

    def hold_images(self, train_images: np.ndarray) -> None:
        """Keep the training split (uint8 N×C×H×W) on this actor's device, to answer `logits_of`."""
        with warnings.catch_warnings():  # object-store arrays are read-only; they are only read here
            warnings.simplefilter("ignore", UserWarning)
            self.images = torch.from_numpy(train_images).to(self.device)

    def logits_of(
        self, batch: Batch, topk: Mapping[str, int] | None = None, names: Sequence[str] | None = None
    ) -> Answer:
        """`logits` of the training batch `batch` (indices and augmentation draws), built here from
        the training split this actor holds."""
        if self.images is None:
            raise RuntimeError("this teacher actor holds no training split; send inputs to logits()")
        return self._answer(batch_inputs(self.images, batch), topk, names)

    def logits(
        self, inputs: np.ndarray, topk: Mapping[str, int] | None = None, names: Sequence[str] | None = None
    ) -> Answer:
        """{group: B×C mean logits} or, for groups in `topk`, (B×K values, B×K int32 class indices);
        only the groups in `names` when given."""
        return self._answer(torch.from_numpy(np.array(inputs)), topk, names)  # read-only arrays: copy

    def _answer(self, x: torch.Tensor, topk: Mapping[str, int] | None, names: Sequence[str] | None) -> Answer:
        topk = topk or {}
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
