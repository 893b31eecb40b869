"""A model's protected samples (`congruent protect`) in its training split: each sample in neither
the val nor the eval split joins train `weight` times, so its loss counts `weight` times an epoch —
the explicit weight of issue 74's "train for it" (SGD on a sample repeated w times is SGD on its
loss times w, in expectation over the shuffles). A protected sample already in train is taken out
first, so it weighs exactly `weight`; those of val or eval are left out (training on them would
score the version on what it was fitted to), and counted."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import torch

from workers.data.text import TextSet
from workers.errors import DataError

if TYPE_CHECKING:
    from workers.data.dataset_splits import DataSplits


@dataclass(frozen=True)
class ProtectedRows:
    """The protected set's rows as the workers train on them: sample ids, texts, class ids, and how
    many times each joins train; `version`: the set's version (what a run logs)."""

    ids: tuple[int, ...]
    texts: tuple[str, ...]
    labels: tuple[int, ...]
    weight: int
    version: int = 0


def with_protected(splits: DataSplits, rows: ProtectedRows) -> DataSplits:
    """`splits` with the protected rows in train: train without them, then each of those in neither
    val nor eval `rows.weight` times (after the train samples, in the set's order; training
    shuffles); DataError when a label is not a class of the data."""
    train, val, test = splits.train, splits.val, splits.eval
    if not isinstance(train, TextSet) or not isinstance(val, TextSet) or not isinstance(test, TextSet):
        raise DataError("protected samples are texts: they join a held text split")
    labels = np.asarray(rows.labels, np.int64)
    outside = labels[(labels < 0) | (labels >= train.num_classes)]
    if len(outside):
        raise DataError(
            f"a protected sample's label {int(outside[0])} is not one of the data's {train.num_classes} classes"
        )
    ids = np.asarray(rows.ids, np.int64)
    held = np.isin(ids, np.concatenate([val.ids.numpy(), test.ids.numpy()]))
    kept = np.flatnonzero(~held)
    protected = TextSet(
        tuple(rows.texts[i] for i in kept) * rows.weight,
        torch.from_numpy(np.tile(labels[kept], rows.weight)),
        train.classes,
        torch.from_numpy(np.tile(ids[kept], rows.weight)),
    )
    rest = train.take(~np.isin(train.ids.numpy(), ids[kept]))
    return replace(
        splits,
        train=rest.followed_by(protected),
        protected_trained=len(kept),
        protected_left_out=int(held.sum()),
    )
