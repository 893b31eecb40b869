"""Cross-fitting folds of the labelled samples (auto's `method.cross_fit`, orchestrator/driver/auto_folds.py).

The train and val splits together are cut into K folds by their samples' ids, as splits are
(workers/data/keys.py): fold(id) = ⌊K · splitmix64(id ⊕ FOLD_SEED) / 2⁶⁴⌋, so a sample keeps its
fold in every process and run, and the eval split is never touched. Fold k's training split is
every other fold, its val split fold k itself: each labelled sample is predicted once, by a model
that never trained on it. K = 1 / val_fraction (`fold_count`), so that a fold's training split is as
large as the train split the shipped model trains on (capped at that size): a model trained on fewer
samples is another model (on the text demo, KD measured −0.29 pt of ER against no treatment when
trained on half the samples, and cost +0.52 pt on eval trained on all of them).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from workers.data.dataset_splits import DataSplits, Samples
from workers.data.images import ImageSet
from workers.data.keys import LIMIT_SEED, rank, unit
from workers.data.text import TextSet
from workers.errors import DataError

FOLD_SEED = 0xF01D5  # the rank folds are cut from: independent of the split's and the limits'


def fold_count(val_fraction: float) -> int:
    """K: as many folds as the val split is a part of train ∪ val (10 at val_fraction 0.1), so that
    every fold's training split is as large as the train split."""
    return max(2, round(1 / val_fraction))


def fold_of(ids: np.ndarray, folds: int) -> np.ndarray:
    """int64 per id: its fold in 0 … folds − 1 (module docstring)."""
    if folds < 2:
        raise ValueError(f"cross-fitting needs at least 2 folds, not {folds}")
    return np.minimum((unit(rank(ids, FOLD_SEED)) * folds).astype(np.int64), folds - 1)


def joined(first: Samples, second: Samples) -> Samples:
    """`first`'s samples, then `second`'s (one kind, the same classes)."""
    if isinstance(first, TextSet) and isinstance(second, TextSet):
        return first.followed_by(second)
    if isinstance(first, ImageSet) and isinstance(second, ImageSet):
        images, labels = torch.cat([first.images, second.images]), torch.cat([first.labels, second.labels])
        return ImageSet(images, labels, first.classes, torch.cat([first.ids, second.ids]))
    raise DataError("cross-fitting reads held splits of one kind (images or texts)")


def cross_fold(splits: DataSplits, fold: int, folds: int) -> DataSplits:
    """`splits` with train = the labelled samples outside fold `fold` and val = those inside it
    (module docstring); eval, the unlabelled texts and the rest as they were. A fold trains on at
    most as many samples as `splits.train` holds, the lowest by the rank `train_limit` keeps (keys.py
    LIMIT_SEED): the folds' models train on as many samples as the shipped one."""
    if not 0 <= fold < folds:
        raise ValueError(f"fold {fold} is not one of 0 … {folds - 1}")
    train, val = splits.train, splits.val
    if not isinstance(train, ImageSet | TextSet) or not isinstance(val, ImageSet | TextSet):
        raise DataError("cross-fitting needs held splits: a streamed source is read once, in order")
    labelled = joined(train, val)
    inside = fold_of(labelled.ids.numpy(), folds) == fold
    kept, train_limit = ~inside, len(train)
    if kept.sum() > train_limit:
        outside = np.flatnonzero(kept)
        lowest = outside[np.argsort(rank(labelled.ids.numpy()[outside], LIMIT_SEED), kind="stable")[:train_limit]]
        kept = np.zeros(len(kept), bool)
        kept[lowest] = True
    return replace(splits, train=labelled.take(torch.from_numpy(kept)), val=labelled.take(torch.from_numpy(inside)))
