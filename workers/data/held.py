"""The split port for a split this process holds whole (`ImageSet`, `TextSet`): training batches are
sample indices plus augmentation draws (workers/data/batches.py), read through the split encoded
once for each model's inputs (`EncodedSplit`, workers/data/encoded.py)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from workers.data.batches import Batch, epoch_batches
from workers.data.encoded import EncodedSplit
from workers.data.input_spec import InputSpec
from workers.data.split_port import NO_DRAWS, Draws, InferenceBatch, Split


class HeldSplit(Split):
    """A split whose samples this process holds; `encoded(inputs)` is each class's own."""

    def training_batches(
        self, batch_size: int, seed: int, epoch: int, inputs: InputSpec | None = None, draws: Draws = NO_DRAWS
    ) -> Iterator[Batch]:
        """A permutation of the samples seeded by (seed, epoch) and, with `draws`, one draw per
        position (`epoch_batches`); the samples are read through `reader`, so `inputs` is unused."""
        return epoch_batches(
            len(self), batch_size, seed, epoch, draws.augment, draws.padding, draws.flip, draws.resized
        )

    def reader(self, inputs: InputSpec | None) -> EncodedSplit:
        return self.encoded(inputs)

    def for_inference(self, inputs: InputSpec | None) -> EncodedSplit:
        return self.encoded(inputs)

    def inference_batches(self, batch_size: int, readers: Sequence[InputSpec | None]) -> Iterator[InferenceBatch]:
        encoded = [self.encoded(inputs) for inputs in readers]
        for start in range(0, len(self), batch_size):
            window = slice(start, start + batch_size)
            yield InferenceBatch(
                [split.rows(start, start + batch_size) for split in encoded], self.ids[window], self.labels[window]
            )
