"""Cross-fitting folds (workers/data/folds.py): every labelled sample in exactly one fold, by its id,
the eval split untouched."""

import numpy as np
import pytest
import torch

from workers.data.dataset_splits import DataSplits
from workers.data.folds import cross_fold, fold_count, fold_of
from workers.data.text import TextSet


def test_a_sample_keeps_its_fold_and_the_folds_are_even():
    ids = np.arange(10_000, dtype=np.int64) * 7919
    folds = fold_of(ids, 5)
    assert np.array_equal(folds, fold_of(ids, 5)) and set(folds.tolist()) == {0, 1, 2, 3, 4}
    assert np.all(np.abs(np.bincount(folds) - 2000) < 150)  # ≈ N/K each
    assert np.array_equal(fold_of(ids[::-1], 5), folds[::-1])  # by id, not by position
    with pytest.raises(ValueError, match="at least 2 folds"):
        fold_of(ids, 1)


def texts(n, start):
    return TextSet(tuple(f"text {i}" for i in range(start, start + n)), torch.arange(n) % 2, ("a", "b"))


def test_each_fold_trains_on_the_others_and_is_predicted_once():
    """train ∪ val of 300 texts in 3 folds: fold k's val is fold k, its train the rest; over the folds
    every labelled text is in exactly one val; eval is the same object in every fold."""
    splits = DataSplits(texts(200, 0), texts(100, 200), texts(50, 300), "fp", "src", "all")
    seen = []
    for k in range(3):
        fold = cross_fold(splits, k, 3)
        assert len(fold.train) == min(200, 300 - len(fold.val))  # the others, at most train's size
        assert not set(fold.train.texts) & set(fold.val.texts)
        assert fold.eval is splits.eval
        seen += list(fold.val.texts)
    assert sorted(seen) == sorted(splits.train.texts + splits.val.texts)


def test_a_fold_trains_on_as_many_samples_as_the_shipped_model():
    """K = 1/val_fraction folds: a fold's training split is then as large as the train split; with fewer
    folds it is capped at that size (the samples `train_limit`'s rank keeps)."""
    assert fold_count(0.1) == 10 and fold_count(0.25) == 4 and fold_count(0.9) == 2
    splits = DataSplits(texts(200, 0), texts(100, 200), texts(50, 300), "fp", "src", "all")
    fold = cross_fold(splits, 0, 2)
    assert len(fold.train) == 300 - len(fold.val) < 200  # two folds: each trains on the other, fewer than train
    capped = cross_fold(splits, 0, 20)  # 285 or so outside the fold: capped at train's 200
    assert len(capped.train) == 200


def test_the_check_refuses_folds_a_class_or_a_streamed_source_cannot_give():
    """More folds than the smallest class has labelled samples, or any folds of a streamed source: one
    line each; cross_fit auto is then off instead."""
    from types import SimpleNamespace

    from orchestrator.planning.facts.auto_candidates import fold_problem
    from orchestrator.planning.facts.kinds import Data, FoldPlan

    rare = TextSet(tuple(f"t{i}" for i in range(23)), torch.tensor([0] * 20 + [1] * 3), ("a", "b"))
    held = Data(DataSplits(rare.take(slice(0, 20)), rare.take(slice(20, 23)), texts(5, 100), "fp", "src", "all"))
    assert fold_problem(3, held, 0.1) == FoldPlan(3, 10, False, 23)
    assert fold_problem(4, held, 0.1) == "4 folds, but class 1 has 3 labelled samples in train ∪ val: at most 3 folds"
    assert fold_problem("auto", held, 0.1) == FoldPlan(3, 10, True, 23)
    assert fold_problem("off", held, 0.1) is None
    streamed = Data(SimpleNamespace(train=object(), val=object(), num_classes=2))
    assert fold_problem(2, streamed, 0.1) == "2 folds need a held source: a streamed one is read once, in order"
    assert fold_problem("auto", streamed, 0.1) is None
