"""A split that no process holds: its samples arrive as batches that carry them.

`StreamedSplit` is what the trainer, the teachers in the student's process and the evaluation read
when a split does not fit in memory. Its implementation on Ray Data (shards of a text table, an
ImageFolder tree; orchestrator/driver/streams.py) reads, decodes and tokenizes on Ray's CPU workers;
this module holds only what the numerical core needs to know (it imports no ray):

- `len`, `classes` and `labels` (int64, in the order `chunks` yields samples: 8 bytes a sample, the
  one per-sample array a streamed split keeps) come from the scan its source made once;
- `epoch(batch_size, seed, epoch, inputs)`: the epoch's batches in a seeded order, each with the
  samples' ids, model-ready values (uint8 images, or token ids of `inputs`' tokenizer) and labels;
  the trainer adds each sample's augmentation from (seed, epoch, id) (`keys.sample_draws`);
- `chunks(batch_size, inputs)`: every sample once, unaugmented, in one fixed order (inference).

`StreamedInputs` turns such a batch into model input on a device, as `EncodedSplit.batch` does for a
split in memory: augmented and normalised images, or token ids cut to the batch's longest sample.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from workers.data.augment import apply_augmentation, to_model_input
from workers.data.batches import Batch
from workers.data.input_spec import InputSpec


class StreamedSplit(ABC):
    """One split of a source read as a stream (module docstring)."""

    classes: tuple[str, ...]
    labels: torch.Tensor
    modality: str

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    @abstractmethod
    def epoch(self, batch_size: int, seed: int, epoch: int, inputs: InputSpec | None = None) -> Iterator[Batch]:
        """The epoch's batches, in an order seeded by (seed, epoch), carrying their samples."""

    @abstractmethod
    def chunks(self, batch_size: int, inputs: InputSpec | None = None) -> Iterator[Batch]:
        """Every sample once, in the fixed order of `labels`, carrying its values (no draws)."""


@dataclass(frozen=True)
class StreamedInputs:
    """How a model reads batches that carry their samples: images normalised by `mean`/`std`
    (the reading model's InputSpec; none: the fixed map to [−1, 1]) on `device`."""

    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    device: torch.device = torch.device("cpu")

    def to(self, device: torch.device | str) -> StreamedInputs:
        return StreamedInputs(self.mean, self.std, torch.device(device))

    def batch(self, batch: Batch) -> torch.Tensor:
        """The batch as model input on this device: its images augmented by its draws and
        normalised, or its token ids cut to its longest sample."""
        if batch.values is None:
            raise ValueError("a streamed split's batch carries its samples; this one has none")
        values = batch.values.to(self.device)
        if batch.lengths is not None:
            longest = max(1, int(batch.lengths.max())) if len(batch.lengths) else 1
            return values[:, :longest].long()
        if batch.draws is not None:
            values = apply_augmentation(values, batch.draws)
        return to_model_input(values, self.mean, self.std)


def streamed_inputs(split: StreamedSplit, inputs: InputSpec | None) -> StreamedInputs:
    """How a model with `inputs` reads `split`'s batches (images: its normalisation)."""
    if inputs is not None and inputs.modality != split.modality:
        raise ValueError(f"a model that reads {inputs.modality} cannot read {split.modality}")
    if split.modality == "text" and (inputs is None or inputs.tokenizer is None):
        raise ValueError("text is read through a text model's tokenizer: give its InputSpec")
    return StreamedInputs() if inputs is None else StreamedInputs(inputs.mean, inputs.std)
