"""The split port: what every split offers, whether a process holds its samples or they stream.

Two implementations answer it, and no caller asks which one it holds:

- **held** (`HeldSplit`, workers/data/held.py): `ImageSet` (uint8 N×C×H×W) and `TextSet` (texts),
  all samples in this process; a training batch is sample indices plus augmentation draws, read
  through the split encoded once for a model's inputs (`EncodedSplit`).
- **streamed** (`StreamedSplit`, workers/data/streamed.py): shards of a text table or an ImageFolder
  tree read on Ray Data (orchestrator/dataplane/); a batch carries its samples, read through
  `StreamedInputs`.

What a split gives (each answered by both):

- `len`, `classes`, `labels` and `ids` (int64, in the split's fixed order; a sample's id names it
  across versions and decides its split, workers/data/keys.py), `modality`, and for images
  `in_channels` and `image_size`;
- `training_batches(...)`: one epoch's batches in an order seeded by (seed, epoch), with each
  image's augmentation draws;
- `reader(inputs)`: how a model that reads `inputs` takes those batches (`.batch(batch)` → model
  input on a device);
- `for_inference(inputs)`: what `predict_logits` reads of it for such a model (the held split
  encoded once; a streamed split itself, its chunks read as they come), and
  `inference_batches(batch_size, readers)`: every sample once, in the fixed order, as each reader's
  model input, with the samples' ids and labels (`InferenceBatch`);
- `encoded(inputs)`: the whole split as one model's input in this process (held only: a stream is
  never held, and says so);
- `shareable()`: what the teacher pool's actors hold of it in the object store (None: nothing
  holds a stream; the actors take the student's streamed batches);
- `tokenizer_texts(limit)` and `statistics_images(limit)`: what a tokenizer trains on and what
  the images' channel statistics are taken over (text and images respectively).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Protocol

import torch

from workers.data.batches import Batch
from workers.data.input_spec import InputSpec

if TYPE_CHECKING:
    from workers.data.encoded import EncodedSplit


@dataclass(frozen=True)
class Draws:
    """What a training epoch draws for each image: a `padding`-pixel shift or, `resized`, a
    random-resized crop box, and a mirror when `flip`; `augment` False: nothing (text, or off)."""

    augment: bool = False
    padding: int = 0
    flip: bool = False
    resized: bool = False


NO_DRAWS = Draws()


class InferenceBatch(NamedTuple):
    """Samples read for inference: one model input per reader, and the samples' ids and labels
    as the split holds them (a stream: as read with the samples, so they travel together)."""

    inputs: list[torch.Tensor]
    ids: torch.Tensor
    labels: torch.Tensor


class BatchReader(Protocol):
    """How one model takes a split's training batches: `batch(batch)` → model input on its device."""

    def batch(self, batch: Batch) -> torch.Tensor: ...

    def to(self, device: torch.device | str) -> Any: ...


class Split(ABC):
    """One split of a source (module docstring): the interface both held and streamed splits give."""

    classes: tuple[str, ...]
    labels: torch.Tensor
    ids: torch.Tensor
    modality: ClassVar[str]  # "image" or "text"

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def in_channels(self) -> int:
        """Images: the channels of every image (0 for text)."""
        return 0

    @property
    def image_size(self) -> int:
        """Images: the side of every (square) image (0 for text)."""
        return 0

    @abstractmethod
    def training_batches(
        self, batch_size: int, seed: int, epoch: int, inputs: InputSpec | None = None, draws: Draws = NO_DRAWS
    ) -> Iterator[Batch]:
        """One epoch's batches in an order seeded by (seed, epoch), each image with `draws`."""

    @abstractmethod
    def reader(self, inputs: InputSpec | None) -> BatchReader:
        """How a model that reads `inputs` takes this split's training batches."""

    @abstractmethod
    def for_inference(self, inputs: InputSpec | None) -> EncodedSplit | Split:
        """What `predict_logits` reads of this split for a model that reads `inputs`."""

    @abstractmethod
    def inference_batches(self, batch_size: int, readers: Sequence[InputSpec | None]) -> Iterator[InferenceBatch]:
        """Every sample once, unaugmented, in the fixed order of `labels`, at most `batch_size` at a
        time: one model input per reader, with the samples' ids and labels."""

    @abstractmethod
    def encoded(self, inputs: InputSpec | None = None) -> EncodedSplit:
        """The whole split as a model that reads `inputs` takes it, held in this process (CPU)."""

    @abstractmethod
    def shareable(self) -> Any:
        """What the teacher pool's actors hold of this split (None: they take streamed batches)."""

    def tokenizer_texts(self, limit: int) -> Sequence[str]:
        """The texts a tokenizer trains on (at most `limit` where the split streams)."""
        raise ValueError(f"a tokenizer trains on text; this split holds {self.modality}")

    def statistics_images(self, limit: int) -> Iterator[torch.Tensor]:
        """uint8 B×C×S×S images, batch by batch, that the channel statistics are taken over."""
        raise ValueError(f"text has no image normalisation; this split holds {self.modality}")

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    @property
    def sample_shape(self) -> tuple[int, ...] | None:
        """One image's (C, H, W); None for text (what an inference batch's size is chosen by)."""
        return (self.in_channels, self.image_size, self.image_size) if self.modality == "image" else None
