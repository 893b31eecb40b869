"""A held image split in memory (`ImageSet`: uint8 N×C×H×W, labels, class names, sample ids) and
what every image format's reader (workers/data/formats/) makes one with: positional ids, the class
names of integer labels, the resize to one size.

Everything lands in an ImageSet, kept in memory (Fashion-MNIST is 55 MB as uint8), so that batching,
augmentation and teacher inference all see the same tensors without DataLoader worker processes on
a 2-core machine.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch

from workers.data.encoded import EncodedSplit, encoded_images
from workers.data.held import HeldSplit
from workers.data.input_spec import InputSpec
from workers.data.keys import key_ids
from workers.errors import DataError


@dataclass(frozen=True)
class ImageSet(HeldSplit):
    """Images as uint8 N×C×H×W, labels as int64 N, the class names, and each sample's id (int64 N,
    workers/data/keys.py; default: the ids of the keys "0" … "N−1", its positions): a held split
    (workers/data/split_port.py)."""

    images: torch.Tensor
    labels: torch.Tensor
    classes: tuple[str, ...] = field(default=())
    ids: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.int64), compare=False)
    modality: ClassVar[str] = "image"

    def __post_init__(self) -> None:
        if self.images.dtype != torch.uint8 or self.images.ndim != 4:
            raise DataError(f"images must be uint8 N×C×H×W, got {self.images.dtype} {tuple(self.images.shape)}")
        if self.labels.ndim != 1 or len(self.labels) != len(self.images):
            raise DataError(f"{len(self.labels)} labels for {len(self.images)} images")
        if len(self.ids) == 0 and len(self.labels):
            object.__setattr__(self, "ids", positional_ids(len(self.labels)))
        if len(self.ids) != len(self.labels):
            raise DataError(f"{len(self.ids)} ids for {len(self.labels)} images")

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    @property
    def in_channels(self) -> int:
        return int(self.images.shape[1])

    @property
    def image_size(self) -> int:
        return int(self.images.shape[2])

    @property
    def sample_shape(self) -> tuple[int, ...]:
        return tuple(self.images.shape[1:])

    def take(self, index: torch.Tensor | np.ndarray | slice) -> ImageSet:
        """The samples at `index`, same class list."""
        if isinstance(index, np.ndarray):
            index = torch.from_numpy(index)
        return ImageSet(self.images[index], self.labels[index], self.classes, self.ids[index])

    def encoded(self, inputs: InputSpec | None = None) -> EncodedSplit:
        return encoded_images(self.images, inputs)

    def shareable(self) -> np.ndarray:
        """The uint8 images as one array: shared memory on a node once in the object store."""
        return self.images.numpy()

    def statistics_images(self, limit: int) -> Iterator[torch.Tensor]:
        """Every image, 1,024 at a time: a held split's statistics are taken over all of it (`limit`
        is a stream's)."""
        yield from self.images.split(1024)


def positional_ids(n: int, prefix: str = "") -> torch.Tensor:
    """int64 ids of the keys `prefix` + "0" … "n−1": the samples of a file of tensors (IDX, .npz),
    named by their row, so rows appended to the file keep the ids (and splits) of the rows before."""
    return torch.from_numpy(key_ids([f"{prefix}{i}" for i in range(n)]))


def class_names(labelled: list[tuple[Path, np.ndarray]], num_classes: int | None = None) -> tuple[str, ...]:
    """Names "0" … "C−1" for the integer labels of `labelled` ((file, labels) pairs of one dataset).

    C is the declared `num_classes` (every label must lie below it); else the largest id + 1, and
    then every id below it must occur: a gap means ids that are not class indices (a 200 among
    0–9 would train a 201-class model) or a mislabelled sample. DataError names the file."""
    present = [(path, labels) for path, labels in labelled if labels.size]
    if not present:
        return tuple(str(c) for c in range(num_classes or 0))
    ids = np.unique(np.concatenate([labels for _, labels in present]))
    lowest, top = int(ids[0]), int(ids[-1])
    if lowest < 0:
        holder = next(path for path, labels in present if int(labels.min()) == lowest)
        raise DataError(f"{holder}: negative class id {lowest}")
    holder = next(path for path, labels in present if int(labels.max()) == top)
    if num_classes is not None:
        if top >= num_classes:
            raise DataError(f"{holder}: label {top} is not below data.num_classes = {num_classes}")
        return tuple(str(c) for c in range(num_classes))
    missing = np.setdiff1d(np.arange(top + 1), ids)
    if missing.size:
        shown = ", ".join(str(int(c)) for c in missing[:5]) + (", …" if missing.size > 5 else "")
        raise DataError(
            f"{holder}: class ids must run 0..C−1 without gaps, but the labels reach {top} and "
            f"{missing.size} ids below it never occur ({shown}); fix the labels, or declare the "
            "class count with data.num_classes"
        )
    return tuple(str(c) for c in range(top + 1))


def fit_to_size(images: torch.Tensor, size: int) -> torch.Tensor:
    """uint8 N×C×H×W → N×C×size×size: the shorter side resized to `size` (bilinear, antialiased),
    then the centre crop (torchvision's Resize + CenterCrop, the usual evaluation view)."""
    from torchvision.transforms.v2 import functional as tvf

    if images.shape[-2:] == (size, size):
        return images
    chunks = [tvf.center_crop(tvf.resize(chunk, [size], antialias=True), [size, size]) for chunk in images.split(4096)]
    return torch.cat(chunks).contiguous()
