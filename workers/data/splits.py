"""Deterministic train / validation / regression-eval splits, data-growth subsets, fingerprints."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

import torch

from workers.data.sources import DataError, ImageSet, load_images

SUBSETS = ("all", "half-classes", "half-samples")
SPLIT_SEED = 20240601  # fixed: splits must not move when the training seed does


@dataclass(frozen=True)
class DataSplits:
    """The three splits every stage uses, and the eval split's fingerprint.

    `eval` is the regression-evaluation set: every version of a model is scored on it, so NFR
    between any two versions is defined. Subsets change `train` and `val` only.
    """

    train: ImageSet
    val: ImageSet
    eval: ImageSet
    fingerprint: str
    source: str
    subset: str

    @property
    def num_classes(self) -> int:
        return self.eval.num_classes

    @property
    def in_channels(self) -> int:
        return self.eval.in_channels

    @property
    def image_size(self) -> int:
        return self.eval.image_size


def fingerprint(data: ImageSet) -> str:
    """sha256 of the images' shape and bytes and the labels' bytes; 16 hex digits."""
    digest = hashlib.sha256()
    digest.update(repr(tuple(data.images.shape)).encode())
    digest.update(data.images.contiguous().numpy().tobytes())
    digest.update(data.labels.to(torch.int64).numpy().astype("<i8").tobytes())
    return digest.hexdigest()[:16]


def half_classes(data: ImageSet) -> ImageSet:
    """Data growth: only the samples of the first ⌈C/2⌉ classes (the class list stays whole)."""
    keep = data.labels < (data.num_classes + 1) // 2
    return data.take(keep)


def half_samples(data: ImageSet, seed: int = SPLIT_SEED) -> ImageSet:
    """Data growth: a fixed random half (rounded up) of each class's samples, original order kept."""
    generator = torch.Generator().manual_seed(seed)
    keep = torch.zeros(len(data), dtype=torch.bool)
    for c in torch.unique(data.labels):
        members = torch.nonzero(data.labels == c).flatten()
        chosen = members[torch.randperm(len(members), generator=generator)[: (len(members) + 1) // 2]]
        keep[chosen] = True
    return data.take(keep)


def _apply_subset(data: ImageSet, subset: str) -> ImageSet:
    if subset == "all":
        return data
    if subset == "half-classes":
        return half_classes(data)
    if subset == "half-samples":
        return half_samples(data)
    raise DataError(f"subset must be one of {', '.join(SUBSETS)}, got {subset!r}")


def load_splits(
    source: str | os.PathLike = "fashion-mnist",
    subset: str = "all",
    val_fraction: float = 0.1,
    eval_fraction: float = 0.2,
    train_limit: int | None = None,
    eval_limit: int | None = None,
    num_classes: int | None = None,
) -> DataSplits:
    """Load a dataset and split it deterministically.

    - eval: the source's own test set (Fashion-MNIST's 10k t10k images), else the last
      `eval_fraction` of a fixed permutation of the pool; its first `eval_limit` samples if given.
    - val: the last `val_fraction` of a fixed permutation of the rest; train: the remainder.
    - `subset` (data growth) then filters train and val; `train_limit` keeps the first N of train.
    - `num_classes` declares the class count of a source whose label ids have gaps.
    """
    if subset not in SUBSETS:
        raise DataError(f"subset must be one of {', '.join(SUBSETS)}, got {subset!r}")
    if not 0 < val_fraction < 1 or not 0 < eval_fraction < 1:
        raise DataError("val_fraction and eval_fraction must lie strictly between 0 and 1")
    pool, test = load_images(source, num_classes)
    if len(pool) == 0:
        raise DataError(f"{source}: the dataset is empty")
    generator = torch.Generator().manual_seed(SPLIT_SEED)
    order = torch.randperm(len(pool), generator=generator)
    if test is None:
        n_eval = max(1, int(round(eval_fraction * len(pool))))
        test = pool.take(order[len(order) - n_eval :].sort().values)
        order = order[: len(order) - n_eval]
    n_val = max(1, int(round(val_fraction * len(order))))
    train = pool.take(order[: len(order) - n_val])
    val = pool.take(order[len(order) - n_val :])
    train, val = _apply_subset(train, subset), _apply_subset(val, subset)
    of_subset = f" of subset {subset}" if subset != "all" else ""
    if train_limit is not None:
        if train_limit > len(train):
            raise DataError(
                f"{source}: train_limit {train_limit} is above the {len(train)} training samples{of_subset}"
            )
        train = train.take(slice(0, train_limit))
    if eval_limit is not None:
        if eval_limit > len(test):
            raise DataError(f"{source}: eval_limit {eval_limit} is above the {len(test)} regression-eval samples")
        test = test.take(slice(0, eval_limit))
    if len(train) == 0 or len(val) == 0 or len(test) == 0:
        raise DataError(f"{source}: too few samples for train/val/eval splits ({len(pool)} in all)")
    _check_coverage(train, torch.unique(torch.cat([pool.labels, test.labels])), source, subset, train_limit)
    return DataSplits(train, val, test, fingerprint(test), str(source), subset)


def _check_coverage(
    train: ImageSet, present: torch.Tensor, source: object, subset: str, train_limit: int | None
) -> None:
    """DataError unless the train split holds every class it should learn: each class of the
    dataset (`present`), or of its first half for `half-classes`. A model never shown a class
    cannot predict it, and its flips on that class would mean nothing."""
    expected = present[present < (train.num_classes + 1) // 2] if subset == "half-classes" else present
    missing = sorted(set(expected.tolist()) - set(torch.unique(train.labels).tolist()))
    if not missing:
        return
    which = "classes of the first half" if subset == "half-classes" else "classes"
    shown = ", ".join(map(str, missing[:5])) + (", …" if len(missing) > 5 else "")
    cause = f"; train_limit {train_limit} is too small" if train_limit is not None else ""
    raise DataError(
        f"{source}: the train split holds {len(expected) - len(missing)} of the {len(expected)} {which} "
        f"(none of {shown}){cause}"
    )
