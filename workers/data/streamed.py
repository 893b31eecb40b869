"""A split that no process holds: its samples arrive as batches that carry them.

`StreamedSplit` is what the trainer, the teachers in the student's process and the evaluation read
when a split does not fit in memory. Its implementation on Ray Data (shards of a text table, an
ImageFolder tree; orchestrator/dataplane/table_streams.py) reads, decodes and tokenizes on Ray's CPU workers;
this module holds only what the numerical core needs to know (it imports no ray):

- `len`, `classes` and `labels` (int64, in the order `chunks` yields samples: 8 bytes a sample, the
  one per-sample array a streamed split keeps) come from the scan its source made once;
- `epoch(batch_size, seed, epoch, inputs)`: the epoch's batches in a seeded order, each with the
  samples' ids, model-ready values (uint8 images, or token ids of `inputs`' tokenizer) and labels;
  the trainer adds each sample's augmentation from (seed, epoch, id) (`augment.sample_draws`);
- `chunks(batch_size, inputs)`: every sample once, unaugmented, in one fixed order (inference).

`StreamedInputs` turns such a batch into model input on a device, as `EncodedSplit.batch` does for a
split in memory: augmented and normalised images, or token ids cut to the batch's longest sample.
"""

from __future__ import annotations

import dataclasses
import hashlib
from abc import abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import torch

from workers.data.augment import apply_augmentation, sample_draws, to_model_input
from workers.data.batches import Batch
from workers.data.encoded import EncodedSplit
from workers.data.input_spec import InputSpec
from workers.data.split_port import NO_DRAWS, Draws, InferenceBatch, Split


class StreamedSplit(Split):
    """One split of a source read as a stream (module docstring): the split port's streamed side."""

    @abstractmethod
    def epoch(self, batch_size: int, seed: int, epoch: int, inputs: InputSpec | None = None) -> Iterator[Batch]:
        """The epoch's batches, in an order seeded by (seed, epoch), carrying their samples."""

    @abstractmethod
    def chunks(self, batch_size: int, inputs: InputSpec | None = None) -> Iterator[Batch]:
        """Every sample once, in the fixed order of `labels`, carrying its values (no draws)."""

    def training_batches(
        self, batch_size: int, seed: int, epoch: int, inputs: InputSpec | None = None, draws: Draws = NO_DRAWS
    ) -> Iterator[Batch]:
        """`epoch`'s batches (read through `inputs`), each image's draws from (seed, epoch, its id)."""
        stream = self.epoch(batch_size, seed, epoch, inputs)
        if not draws.augment:
            return stream
        return (
            dataclasses.replace(
                batch, draws=sample_draws(batch.indices, seed, epoch, draws.padding, draws.flip, draws.resized)
            )
            for batch in stream
        )

    def reader(self, inputs: InputSpec | None) -> StreamedInputs:
        return streamed_inputs(self, inputs)

    def for_inference(self, inputs: InputSpec | None) -> StreamedSplit:
        return self  # its chunks are read as they come, through each model's reader

    def inference_batches(self, batch_size: int, readers: Sequence[InputSpec | None]) -> Iterator[InferenceBatch]:
        as_read = [streamed_inputs(self, inputs) for inputs in readers]
        for batch in self.chunks(batch_size, readers[0] if readers else None):
            assert batch.labels is not None, "a streamed batch carries its labels"
            yield InferenceBatch([reader.batch(batch) for reader in as_read], batch.indices, batch.labels)

    def encoded(self, inputs: InputSpec | None = None) -> EncodedSplit:
        raise ValueError("a streamed split is never held in memory: read it by batches (packed replicas need pack 1)")

    def shareable(self) -> None:
        return None  # nothing holds a stream: the pool's actors take the student's streamed batches


@dataclass(frozen=True)
class StreamedSplits:
    """A streamed source's three splits and its fingerprint (over the files' names, sizes and
    contents, and the split fractions): equal, and hashed, by fingerprint and source, so a job's
    `DataRequest` that carries it stays a cache key."""

    train: StreamedSplit = field(compare=False)
    val: StreamedSplit = field(compare=False)
    eval: StreamedSplit = field(compare=False)
    fingerprint: str
    source: str
    skipped: tuple[str, ...] = field(default=(), compare=False)  # files left out as corrupt (data.skip_corrupt)


@lru_cache(maxsize=16)  # asked for each streamed batch; a tokenizer's JSON is hundreds of kB
def tokens_digest(inputs: InputSpec) -> str:
    """What token ids depend on: the tokenizer, the cut and the special tokens; 16 hex digits."""
    key = f"{inputs.tokenizer}\0{inputs.max_length}\0{inputs.add_special_tokens}"
    return hashlib.sha256(key.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class StreamedInputs:
    """How a model that reads `inputs` takes batches that carry their samples, on `device`: images
    normalised by its mean/std (none: the fixed map to [−1, 1]); text as the stream's token ids
    when they come from its tokenizer, else its tokenizer run on the batch's texts."""

    inputs: InputSpec | None = None
    device: torch.device = torch.device("cpu")

    def to(self, device: torch.device | str) -> StreamedInputs:
        return StreamedInputs(self.inputs, torch.device(device))

    def batch(self, batch: Batch) -> torch.Tensor:
        """The batch as model input on this device: its images augmented by its draws and
        normalised, or its token ids cut to its longest sample."""
        if batch.values is None:
            raise ValueError("a streamed split's batch carries its samples; this one has none")
        spec = self.inputs
        if batch.lengths is not None:
            values, lengths = batch.values, batch.lengths
            if spec is not None and batch.tokens_of != tokens_digest(spec):
                assert batch.texts is not None, "a streamed text batch carries its texts"
                from workers.data.tokenizer import encode_texts

                values, lengths = encode_texts(spec, batch.texts)
            longest = max(1, int(lengths.max())) if len(lengths) else 1
            return values[:, :longest].to(self.device).long()
        values = batch.values.to(self.device)
        if batch.draws is not None:
            values = apply_augmentation(values, batch.draws)
        mean, std = (None, None) if spec is None else (spec.mean, spec.std)
        return to_model_input(values, mean, std)


def streamed_inputs(split: StreamedSplit, inputs: InputSpec | None) -> StreamedInputs:
    """How a model with `inputs` reads `split`'s batches."""
    if inputs is not None and inputs.modality != split.modality:
        raise ValueError(f"a model that reads {inputs.modality} cannot read {split.modality}")
    if split.modality == "text" and (inputs is None or inputs.tokenizer is None):
        raise ValueError("text is read through a text model's tokenizer: give its InputSpec")
    return StreamedInputs(inputs)
