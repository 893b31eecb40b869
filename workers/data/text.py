"""Text held in memory: a :class:`TextSet` is the texts as a tuple of str, int64 labels and the class
names — a held split of the split port (workers/data/split_port.py). Token ids are not computed here: each
text model trains its own tokenizer (workers/data/tokenizer.py) and `TextSet.encoded` tokenizes a
split once per tokenizer. Reading tables into a TextSet is workers/data/text_tables.py's.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import torch

from workers.data.encoded import EncodedSplit, encoded_texts
from workers.data.held import HeldSplit
from workers.data.input_spec import InputSpec
from workers.data.keys import key_ids, text_keys
from workers.errors import DataError

UNLABELLED = -1  # the label of a text without one (`data.unlabelled`: only an ELODI student's LDI term reads it)


@dataclass(frozen=True)
class TextSet(HeldSplit):
    """Texts, labels as int64 N (a class id, or UNLABELLED), the class names (empty: the classes are
    0 … max label), and each sample's id (int64 N, workers/data/keys.py; default: the ids of the
    stripped texts, so copies of a text share one): a held split (workers/data/split_port.py)."""

    texts: tuple[str, ...]
    labels: torch.Tensor
    classes: tuple[str, ...] = field(default=())
    ids: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.int64), compare=False)
    modality: ClassVar[str] = "text"

    def __post_init__(self) -> None:
        if not isinstance(self.texts, tuple) or not all(isinstance(t, str) for t in self.texts):
            raise DataError("texts must be a tuple of str")
        if self.labels.dtype != torch.int64 or self.labels.ndim != 1:
            raise DataError(f"labels must be int64 N, got {self.labels.dtype} {tuple(self.labels.shape)}")
        if len(self.labels) != len(self.texts):
            raise DataError(f"{len(self.labels)} labels for {len(self.texts)} texts")
        if len(self.labels) and int(self.labels.min()) < UNLABELLED:
            raise DataError(f"negative class id {int(self.labels.min())}")
        if self.classes and len(self.labels) and int(self.labels.max()) >= len(self.classes):
            raise DataError(f"label {int(self.labels.max())} is not below the {len(self.classes)} classes")
        if len(self.ids) == 0 and self.texts:
            object.__setattr__(self, "ids", torch.from_numpy(key_ids(text_keys(self.texts))))
        if len(self.ids) != len(self.texts):
            raise DataError(f"{len(self.ids)} ids for {len(self.texts)} texts")

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def num_classes(self) -> int:
        if self.classes:
            return len(self.classes)
        return int(self.labels.max()) + 1 if len(self.labels) else 0

    def take(self, index: torch.Tensor | np.ndarray | slice) -> TextSet:
        """The samples at `index` (a bool mask, indices or a slice), same class list."""
        if isinstance(index, np.ndarray):
            index = torch.from_numpy(index)
        positions = torch.arange(len(self.texts))[index]
        texts = tuple(self.texts[i] for i in positions.tolist())
        return TextSet(texts, self.labels[positions], self.classes, self.ids[positions])

    def followed_by(self, other: TextSet) -> TextSet:
        """This split's samples, then `other`'s (same classes)."""
        labels, ids = torch.cat([self.labels, other.labels]), torch.cat([self.ids, other.ids])
        return TextSet(self.texts + other.texts, labels, self.classes, ids)

    def encoded(self, inputs: InputSpec | None = None) -> EncodedSplit:
        """Token ids of `inputs`' tokenizer, computed once per (texts, tokenizer) in this process."""
        return encoded_texts(text_fingerprint(self), self.texts, inputs)

    def shareable(self) -> TextSet:
        """The texts themselves: each teacher group tokenizes them its own way."""
        return self

    def tokenizer_texts(self, limit: int) -> Sequence[str]:
        """Every text: a held split's tokenizer trains on all of it (`limit` is a stream's)."""
        return self.texts


def text_fingerprint(data: TextSet) -> str:
    """sha256 of the texts (UTF-8, each prefixed by its byte length) and the labels (int64
    little-endian); 16 hex digits."""
    digest = hashlib.sha256()
    digest.update(len(data.texts).to_bytes(8, "little"))
    for text in data.texts:
        encoded = text.encode("utf-8", "surrogatepass")
        digest.update(len(encoded).to_bytes(8, "little"))
        digest.update(encoded)
    digest.update(data.labels.to(torch.int64).numpy().astype("<i8").tobytes())
    return digest.hexdigest()[:16]
