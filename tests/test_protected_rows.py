"""Protected samples in the train split (`train.protected_weight`, workers/data/protected_rows.py):
each one in neither val nor eval joins train `weight` times, a copy already in train is replaced,
those of val or eval are left out and counted, a label beyond the classes is one DataError."""

from __future__ import annotations

import pytest
import torch

from workers.data.dataset_splits import DataSplits
from workers.data.keys import key_ids, text_keys
from workers.data.protected_rows import ProtectedRows, with_protected
from workers.data.text import TextSet
from workers.errors import DataError

CLASSES = ("negative", "positive")


def texts(*words: str, label: int = 0) -> TextSet:
    return TextSet(tuple(words), torch.full((len(words),), label, dtype=torch.int64), CLASSES)


def rows(words: list[str], labels: list[int], weight: int) -> ProtectedRows:
    return ProtectedRows(tuple(key_ids(text_keys(words)).tolist()), tuple(words), tuple(labels), weight, 1)


SPLITS = DataSplits(texts("a", "b", "c"), texts("v"), texts("e"), "fp", "table", "all")


def test_each_trainable_protected_sample_joins_train_weight_times():
    out = with_protected(SPLITS, rows(["b", "new", "v", "e"], [1, 1, 0, 0], weight=3))
    assert list(out.train.texts) == ["a", "c", "b", "new", "b", "new", "b", "new"]
    assert out.train.labels.tolist() == [0, 0, 1, 1, 1, 1, 1, 1]  # "b" carries the protected label
    assert out.train.ids.tolist().count(int(key_ids(["b"])[0])) == 3  # its train copy replaced, not added to
    assert (out.protected_trained, out.protected_left_out) == (2, 2)  # "v" (val) and "e" (eval) left out
    assert out.val is SPLITS.val and out.eval is SPLITS.eval


def test_a_label_beyond_the_classes_is_one_error():
    with pytest.raises(DataError, match="label 2 is not one of the data's 2 classes"):
        with_protected(SPLITS, rows(["x"], [2], weight=1))
