"""The teacher: frozen models that serve reference logits for a batch (a plain class; the driver
runs it as a Ray actor, orchestrator/execution/pool.py).

A `TeacherActor` loads every group of checkpoints it is given — e.g. {"teacher": the m replicas,
"old": the deployed model} — and answers with each group's mean logits, or, for a group served as
top-K, only the K largest values and their class indices. Holding the training split (uint8 images, e.g.
from Ray's object store, shared by the actors of a node, or texts: `hold_split`), it answers `logits_of(batch)` for a
`Batch` — sample indices and augmentation draws, a few bytes a sample — rebuilding the student's
very inputs itself. Made for a streamed split (`streamed`), it answers a streamed batch, which
carries its samples (uint8 images or token ids and texts, and the draws), each group reading it
through its own inputs. The logits of unaugmented samples are kept by the pool's client, in the
student's process (orchestrator/execution/pool.py).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch

from workers.data import Batch
from workers.data.encoded import EncodedSplit
from workers.data.input_spec import InputSpec
from workers.data.streamed import StreamedInputs
from workers.data.text import TextSet
from workers.models.checkpoints import load_model
from workers.runtime import use_threads
from workers.storage import fetch_checkpoint
from workers.teachers.frozen import FrozenModels
from workers.training.losses import TopKLogits

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
        streamed: bool = False,
    ) -> None:
        use_threads(threads)
        self.device = torch.device(device)
        self.groups: dict[str, FrozenModels] = {}
        self.inputs: dict[str, InputSpec] = {}  # what each group's models read (text: their tokenizer)
        for name, uris in groups.items():
            loaded = [load_model(fetch_checkpoint(uri), allow_user_factories) for uri in uris]
            specs = {settings.inputs for _, settings in loaded}
            if len(specs) > 1:
                raise ValueError(f"the models of teacher group {name!r} read different inputs")
            self.inputs[name] = specs.pop()
            reader = StreamedInputs(self.inputs[name]) if streamed else None
            self.groups[name] = FrozenModels([model for model, _ in loaded], device, precision, reader=reader)
        self.split: dict[str, EncodedSplit] | None = None  # the training split per group, once held
        self.batches_served = 0

    def hold_split(self, train: np.ndarray | TextSet) -> None:
        """Keep the training split — uint8 images N×C×H×W, or texts — on this actor's device as each
        group reads it (text through the group's own tokenizer), to answer `logits_of`."""
        if isinstance(train, np.ndarray):
            with warnings.catch_warnings():  # object-store arrays are read-only; they are only read here
                warnings.simplefilter("ignore", UserWarning)
                images = torch.from_numpy(train).to(self.device)
            self.split = {name: EncodedSplit(images, None, spec.mean, spec.std) for name, spec in self.inputs.items()}
            return
        self.split = {name: train.encoded(self.inputs[name]).to(self.device) for name in self.groups}

    def logits_of(
        self, batch: Batch, topk: Mapping[str, int] | None = None, names: Sequence[str] | None = None
    ) -> Answer:
        """{group: B×C mean logits} of the training batch `batch` or, for groups in `topk`, (B×K
        values, B×K int32 class indices); only the groups in `names` when given. Each group's input
        is built here: from the training split this actor holds (`batch`: indices and augmentation
        draws), or from the samples a streamed batch carries."""
        if batch.values is not None:  # a streamed batch carries its samples
            return self._answer(lambda name: self.groups[name].of_streamed(batch), topk, names)
        if self.split is None:
            raise RuntimeError("this teacher actor holds no training split: hold_split first, or send a streamed batch")
        split = self.split
        return self._answer(lambda name: self.groups[name](split[name].batch(batch)), topk, names)

    def _answer(
        self, logits_of: Callable[[str], torch.Tensor], topk: Mapping[str, int] | None, names: Sequence[str] | None
    ) -> Answer:
        topk = topk or {}
        out: Answer = {}
        for name in self.groups:
            if names is not None and name not in names:
                continue
            logits = logits_of(name).cpu()
            if name in topk:
                top = TopKLogits.of(logits, topk[name])
                out[name] = (top.values.numpy(), top.indices.numpy())
            else:
                out[name] = logits.numpy()
        self.batches_served += 1
        return out

    def info(self) -> dict[str, int]:
        return {"pid": os.getpid(), "batches_served": self.batches_served}
