"""Deterministic train / validation / regression-eval splits, data-growth subsets, fingerprints."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

import torch

from workers.data.sources import DataError, ImageSet, load_images
from workers.data.split import Split
from workers.data.text import TextSet, duplicate_groups, text_fingerprint
from workers.data.text_tables import load_tweet_sentiment, read_text_table
from workers.names import TEXT_FORMATS

Samples = ImageSet | TextSet

SUBSETS = ("all", "half-classes", "half-samples")
SPLIT_SEED = 20240601  # fixed: splits must not move when the training seed does


@dataclass(frozen=True)
class DataSplits:
    """The three splits every stage uses, and the eval split's fingerprint.

    `eval` is the regression-evaluation set: every version of a model is scored on it, so NFR
    between any two versions is defined. Subsets change `train` and `val` only.
    """

    train: Split
    val: Split
    eval: Split
    fingerprint: str
    source: str
    subset: str

    @property
    def num_classes(self) -> int:
        return self.eval.num_classes

    @property
    def modality(self) -> str:
        return self.eval.modality

    @property
    def in_channels(self) -> int:
        assert self.modality == "image", "text has no channels"
        return self.eval.in_channels

    @property
    def image_size(self) -> int:
        assert self.modality == "image", "text has no image size"
        return self.eval.image_size


def fingerprint(data: Samples) -> str:
    """sha256 of the images' shape and bytes and the labels' bytes (of the texts and labels for
    text); 16 hex digits."""
    if isinstance(data, TextSet):
        return text_fingerprint(data)
    digest = hashlib.sha256()
    digest.update(repr(tuple(data.images.shape)).encode())
    digest.update(data.images.contiguous().numpy().tobytes())
    digest.update(data.labels.to(torch.int64).numpy().astype("<i8").tobytes())
    return digest.hexdigest()[:16]


def half_classes(data: Samples) -> Samples:
    """Data growth: only the samples of the first ⌈C/2⌉ classes (the class list stays whole)."""
    keep = data.labels < (data.num_classes + 1) // 2
    return data.take(keep)


def half_samples(data: Samples, seed: int = SPLIT_SEED) -> Samples:
    """Data growth: a fixed random half (rounded up) of each class's samples, original order kept."""
    generator = torch.Generator().manual_seed(seed)
    keep = torch.zeros(len(data), dtype=torch.bool)
    for c in torch.unique(data.labels):
        members = torch.nonzero(data.labels == c).flatten()
        chosen = members[torch.randperm(len(members), generator=generator)[: (len(members) + 1) // 2]]
        keep[chosen] = True
    return data.take(keep)


def _apply_subset(data: Samples, subset: str) -> Samples:
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
    text_column: str = "text",
    label_column: str = "label",
    encoding: str = "utf-8",
    image_size: int | None = None,
) -> DataSplits:
    """Load a dataset and split it deterministically.

    - eval: the source's own test set (Fashion-MNIST's 10k t10k images), else the last
      `eval_fraction` of a fixed permutation of the pool; its first `eval_limit` samples if given.
    - val: the last `val_fraction` of a fixed permutation of the rest; train: the remainder.
    - `subset` (data growth) then filters train and val; `train_limit` keeps the first N of train.
    - `num_classes` declares the class count of a source whose label ids have gaps.
    - `image_size`: images resized and centre-cropped to image_size² (workers/data/sources.py).
    - Text (`tweet-sentiment`, a .csv/.tsv/.jsonl/.parquet table read by `text_column`,
      `label_column`, `encoding`): the permutations are of distinct texts, not samples, so every
      copy of a duplicated text lands on the same side of each split.
    """
    if subset not in SUBSETS:
        raise DataError(f"subset must be one of {', '.join(SUBSETS)}, got {subset!r}")
    if not 0 < val_fraction < 1 or not 0 < eval_fraction < 1:
        raise DataError("val_fraction and eval_fraction must lie strictly between 0 and 1")
    pool, test = load_samples(source, num_classes, text_column, label_column, encoding, image_size)
    if len(pool) == 0:
        raise DataError(f"{source}: the dataset is empty")
    generator = torch.Generator().manual_seed(SPLIT_SEED)
    train: Samples
    val: Samples
    if isinstance(pool, TextSet):
        train, val, test = _split_text(pool, val_fraction, eval_fraction, generator)
    else:
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


def load_samples(
    source: str | os.PathLike,
    num_classes: int | None,
    text_column: str,
    label_column: str,
    encoding: str,
    image_size: int | None = None,
) -> tuple[Samples, Samples | None]:
    """(pool, the source's own test set or None) of an image or a text source."""
    if str(source) == "tweet-sentiment":
        return load_tweet_sentiment(), None
    if str(source).lower().endswith(TEXT_FORMATS):
        return read_text_table(source, text_column, label_column, encoding, num_classes), None
    return load_images(source, num_classes, image_size)


def _split_text(
    pool: TextSet, val_fraction: float, eval_fraction: float, generator: torch.Generator
) -> tuple[TextSet, TextSet, TextSet]:
    """Train, val and eval of a text pool by a fixed permutation of its distinct texts: the last
    `eval_fraction` of them to eval, the last `val_fraction` of the rest to val, each split in
    permuted order (a table sorted by label still gives an `eval_limit` of every class)."""
    groups = duplicate_groups(pool)
    count = int(groups.max()) + 1
    rank = torch.empty(count, dtype=torch.long)
    rank[torch.randperm(count, generator=generator)] = torch.arange(count)
    sample_rank = rank[groups]
    n_eval = max(1, int(round(eval_fraction * count)))
    rest = count - n_eval
    n_val = max(1, int(round(val_fraction * rest)))

    def members(low: int, high: int) -> torch.Tensor:
        index = torch.nonzero((sample_rank >= low) & (sample_rank < high)).flatten()
        return index[torch.argsort(sample_rank[index], stable=True)]

    return (
        pool.take(members(0, rest - n_val)),
        pool.take(members(rest - n_val, rest)),
        pool.take(members(rest, count)),
    )


def _check_coverage(
    train: Samples, present: torch.Tensor, source: object, subset: str, train_limit: int | None
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
