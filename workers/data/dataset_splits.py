"""Train / validation / regression-eval splits of a held source by its samples' ids, subsets, fingerprints."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from functools import cached_property

import torch

from workers.data.images import ImageSet
from workers.data.keys import EVAL, TRAIN, VAL, split_codes
from workers.data.selection import SUBSETS, Selection, split_selection
from workers.data.sources import load_images
from workers.data.split_port import Split
from workers.data.text import TextSet, text_fingerprint
from workers.data.text_tables import load_tweet_sentiment, read_text_table, read_texts
from workers.data.unlabelled import unlabelled_texts
from workers.errors import DataError
from workers.names import TEXT_FORMATS

Samples = ImageSet | TextSet


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
    unlabelled: TextSet | None = None  # `data.unlabelled`'s texts kept (workers/data/unlabelled.py)
    unlabelled_dropped: int = 0  # its rows left out: copies, or texts of the labelled splits
    protected_trained: int = 0  # protected samples in train (`train.protected_weight` times each)
    protected_left_out: int = 0  # protected samples of val or eval, not trained on

    @cached_property
    def distillation_split(self) -> Split:
        """What an ELODI student trains on: `train`, followed by the unlabelled texts when there are any
        (joined once: the student and its in-process teachers read the same split)."""
        if self.unlabelled is None:
            return self.train
        assert isinstance(self.train, TextSet), "unlabelled texts go with held text"
        return self.train.followed_by(self.unlabelled)

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


def select(data: Samples, selection: Selection) -> Samples:
    """The samples `selection` keeps (workers/data/selection.py), in their order."""
    return data.take(torch.from_numpy(selection.mask(data.ids.numpy(), data.labels.numpy())))


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
    id_column: str | None = None,
    unlabelled: str | os.PathLike | None = None,
) -> DataSplits:
    """Load a dataset and split it by its samples' ids (workers/data/keys.py), as a stream does.

    - eval: the source's own test set (Fashion-MNIST's 10k t10k images), else the samples whose
      id falls in the last `eval_fraction`; `eval_limit`: the N of them with the lowest rank.
    - val: the ids in the last `val_fraction` of the rest; train: the remainder.
    - `subset` (data growth) then filters train and val; `train_limit` keeps N of train
      (workers/data/selection.py: filters of ids, the same a stream applies).
    - `num_classes` declares the class count of a source whose label ids have gaps.
    - `image_size`: images resized and centre-cropped to image_size² (workers/data/sources.py).
    - Text (`tweet-sentiment`, a .csv/.tsv/.jsonl/.parquet table read by `text_column`,
      `label_column`, `encoding`, and `id_column` when the table names its samples): without an id
      column a text's id is that of its stripped content, so every copy of a duplicated text lands
      on the same side of each split.
    - `unlabelled`: a text table of texts without labels, read by `text_column` and `encoding`
      (workers/data/unlabelled.py: those in no split, each once).
    Each split keeps the source's order.
    """
    if subset not in SUBSETS:
        raise DataError(f"subset must be one of {', '.join(SUBSETS)}, got {subset!r}")
    if not 0 < val_fraction < 1 or not 0 < eval_fraction < 1:
        raise DataError("val_fraction and eval_fraction must lie strictly between 0 and 1")
    pool, test = load_samples(source, num_classes, text_column, label_column, encoding, image_size, id_column)
    if len(pool) == 0:
        raise DataError(f"{source}: the dataset is empty")
    codes = torch.from_numpy(split_codes(pool.ids.numpy(), val_fraction, 0.0 if test is not None else eval_fraction))
    train: Samples = pool.take(codes == TRAIN)
    val: Samples = pool.take(codes == VAL)
    if test is None:
        test = pool.take(codes == EVAL)
    kept = {}
    for code, split, limit in ((TRAIN, train, train_limit), (VAL, val, None), (EVAL, test, eval_limit)):
        ids, labels = split.ids.numpy(), split.labels.numpy()
        kept[code] = select(split, split_selection(code, subset, pool.num_classes, limit, ids, labels, source))
    train, val, test = kept[TRAIN], kept[VAL], kept[EVAL]
    if len(train) == 0 or len(val) == 0 or len(test) == 0:
        raise DataError(f"{source}: too few samples for train/val/eval splits ({len(pool)} in all)")
    _check_coverage(train, torch.unique(torch.cat([pool.labels, test.labels])), source, subset, train_limit)
    if unlabelled is None:
        return DataSplits(train, val, test, fingerprint(test), str(source), subset)
    if not isinstance(train, TextSet) or not isinstance(val, TextSet) or not isinstance(test, TextSet):
        raise DataError(f"{unlabelled}: unlabelled texts go with text data; {source} holds images")
    texts = read_texts(unlabelled, text_column, encoding, label_column)
    extra = unlabelled_texts(texts, (train, val, test), train.classes)
    return DataSplits(train, val, test, fingerprint(test), str(source), subset, extra.texts, extra.dropped)


def load_samples(
    source: str | os.PathLike,
    num_classes: int | None,
    text_column: str,
    label_column: str,
    encoding: str,
    image_size: int | None = None,
    id_column: str | None = None,
) -> tuple[Samples, Samples | None]:
    """(pool, the source's own test set or None) of an image or a text source."""
    if str(source) == "tweet-sentiment":
        return load_tweet_sentiment(), None
    if str(source).lower().endswith(TEXT_FORMATS):
        return read_text_table(source, text_column, label_column, encoding, num_classes, id_column), None
    if id_column is not None:
        raise DataError(f"{source}: data.id_column names a column of a text table; images are named by their path")
    return load_images(source, num_classes, image_size)


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
