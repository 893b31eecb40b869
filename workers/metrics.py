"""Regression metrics for classifier updates.

Notation: N samples with labels ℓ, predicted class ids ŷ. Every rate is a
global count over all N samples divided by N (never a mean of per-batch rates).
Inputs may be numpy arrays or torch tensors: 1-D integer class ids, or 2-D
float logits (N×C) that are reduced to class ids with argmax.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import astuple, dataclass
from typing import Any, TypedDict

import numpy as np

# Samples per block in `nfr_matrix` (bounds memory); float32 sums of 0/1 values stay
# exact integers up to 2**24, so each block's counts are exact.
_EXACT_FLOAT32_BLOCK = 1 << 16


def _as_numpy(values: Any) -> np.ndarray:
    """Return `values` as a numpy array (torch tensors via detach/cpu/numpy)."""
    if hasattr(values, "detach"):
        values = values.detach().cpu().numpy()
    return np.asarray(values)


def class_ids(predictions: Any) -> np.ndarray:
    """Class ids as int64: ŷ = ids for 1-D integer input, ŷ_n = argmax_c z_nc for 2-D logits.

    Ties in the logits resolve to the lowest class index (np.argmax).
    """
    array = _as_numpy(predictions)
    if array.ndim == 1 and np.issubdtype(array.dtype, np.integer):
        return array.astype(np.int64, copy=False)
    if array.ndim == 2 and np.issubdtype(array.dtype, np.floating):
        if array.shape[1] == 0:
            raise ValueError("logits have zero classes (shape N×0)")
        if not np.isfinite(array).all():
            raise ValueError("logits contain NaN or Inf")
        return np.argmax(array, axis=1).astype(np.int64)
    raise ValueError(
        "predictions must be 1-D integer class ids or 2-D float logits (N×C), "
        f"got a {array.ndim}-D array of dtype {array.dtype}"
    )


def _labels(labels: Any) -> np.ndarray:
    """Labels as a non-empty 1-D int64 array."""
    array = _as_numpy(labels)
    if array.ndim != 1 or not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"labels must be a 1-D integer array, got a {array.ndim}-D array of dtype {array.dtype}")
    if array.size == 0:
        raise ValueError("metrics are undefined on an empty set (N = 0)")
    return array.astype(np.int64, copy=False)


def _correct(predictions: Any, labels: np.ndarray, name: str) -> np.ndarray:
    """Boolean vector 1[ŷ = ℓ], after checking that lengths match."""
    ids = class_ids(predictions)
    if len(ids) != len(labels):
        raise ValueError(f"{name} has {len(ids)} samples but labels have {len(labels)}")
    return ids == labels


def error_rate(predictions: Any, labels: Any) -> float:
    """ER = (1/N) Σ 1[ŷ ≠ ℓ]."""
    truth = _labels(labels)
    return float(np.count_nonzero(~_correct(predictions, truth, "predictions")) / len(truth))


def negative_flip_rate(old: Any, new: Any, labels: Any) -> float:
    """NFR = (1/N) Σ 1[ŷ_old = ℓ ∧ ŷ_new ≠ ℓ]."""
    truth = _labels(labels)
    old_correct = _correct(old, truth, "old predictions")
    new_correct = _correct(new, truth, "new predictions")
    return float(np.count_nonzero(old_correct & ~new_correct) / len(truth))


def positive_flip_rate(old: Any, new: Any, labels: Any) -> float:
    """PFR = (1/N) Σ 1[ŷ_old ≠ ℓ ∧ ŷ_new = ℓ]."""
    truth = _labels(labels)
    old_correct = _correct(old, truth, "old predictions")
    new_correct = _correct(new, truth, "new predictions")
    return float(np.count_nonzero(~old_correct & new_correct) / len(truth))


def relative_nfr(nfr: float, er_old: float, er_new: float) -> float | None:
    """Rel-NFR = NFR / ((1 − ER_old) · ER_new); None (undefined) when the denominator is 0.

    The denominator is the NFR expected if old and new errors were independent.
    """
    denominator = (1.0 - er_old) * er_new
    if denominator == 0:
        return None
    return float(nfr / denominator)


def nfr_matrix(predictions_list: Sequence[Any], labels: Any, scopes: Sequence[Any] | None = None) -> np.ndarray:
    """V×V matrix M[i, j] = NFR of version j relative to version i; diagonal 0.

    With correctness C (V×N, C[v, n] = 1[ŷ_v,n = ℓ_n]) and Gram matrix G = C·Cᵀ
    (G[i, j] = #both correct): M[i, j] = (G[i, i] − G[i, j]) / N. With `scopes` (one boolean
    mask S_i over the N samples per version: e.g. the classes version i was trained on), row i
    counts only its samples: G[i, j] = Σ_n S_in C_in C_jn and M[i, j] = (G[i, i] − G[i, j]) / |S_i|.
    G is accumulated blockwise in float32 (exact per block) into int64 counts.
    """
    truth = _labels(labels)
    if len(predictions_list) == 0:
        raise ValueError("nfr_matrix needs at least one prediction set")
    correct = np.stack([_correct(p, truth, f"predictions[{v}]") for v, p in enumerate(predictions_list)])
    scope = np.ones_like(correct) if scopes is None else np.stack([np.asarray(s, dtype=bool) for s in scopes])
    if scope.shape != correct.shape:
        raise ValueError(f"scopes must be {correct.shape[0]} masks of {correct.shape[1]} samples")
    return nfr_of_counts(both_correct_counts(correct, scope), scope.sum(axis=1))


def both_correct_counts(correct: np.ndarray, scope: np.ndarray) -> np.ndarray:
    """G[i, j] = Σ_n S_in C_in C_jn (int64, V×V) of V×n boolean correctness C and scopes S: counts of
    disjoint blocks of samples add up. Accumulated blockwise in float32 (exact per block)."""
    counts = np.zeros((len(correct), len(correct)), dtype=np.int64)
    for start in range(0, correct.shape[1], _EXACT_FLOAT32_BLOCK):
        window = slice(start, start + _EXACT_FLOAT32_BLOCK)
        block = correct[:, window].astype(np.float32)
        counts += ((block * scope[:, window]) @ block.T).astype(np.int64)
    return counts


def nfr_of_counts(both_correct: np.ndarray, scope_sizes: np.ndarray) -> np.ndarray:
    """M[i, j] = (G[i, i] − G[i, j]) / |S_i| from `both_correct_counts` G summed over every sample and
    each version's scope size |S_i| (a row of an empty scope is 0)."""
    only_old_correct = np.diag(both_correct)[:, None] - both_correct
    return only_old_correct / np.maximum(np.asarray(scope_sizes), 1)[:, None]


class UpdateReport(TypedDict):
    """One update measured on one split (JSON as it is): rel_nfr None where undefined."""

    n: int
    er_old: float
    er_new: float
    nfr: float
    pfr: float
    rel_nfr: float | None


class _Evaluated(TypedDict):
    error_rate: float


class EvaluationMetrics(_Evaluated, total=False):
    """A version on the regression-eval split (the `congruent run --json` contract): its ER, and
    each comparison it has — against the old model (on the old model's classes, and on all when
    those differ), against the paragon, and the paragon against the old model."""

    vs_old: UpdateReport
    vs_old_all_classes: UpdateReport
    vs_paragon: UpdateReport
    paragon_vs_old: UpdateReport


@dataclass(frozen=True)
class FlipCounts:
    """The counts one update's rates are made of, over the samples seen so far: n, the old and the
    new model's errors, negative flips (old right, new wrong) and positive flips (old wrong, new
    right). Counts of disjoint chunks add up (`+`), so a split read in chunks is counted globally."""

    n: int = 0
    old_errors: int = 0
    new_errors: int = 0
    negative: int = 0
    positive: int = 0

    @classmethod
    def of(cls, old: Any, new: Any, labels: Any) -> FlipCounts:
        """The counts of one chunk: predictions (class ids or logits) of both models and the labels."""
        truth = _as_numpy(labels).astype(np.int64, copy=False)
        return cls.of_correct(_correct(old, truth, "old predictions"), _correct(new, truth, "new predictions"))

    @classmethod
    def of_names(cls, old: Any, new: Any, labels: Any) -> FlipCounts:
        """The counts where answers and labels are class names, compared as text: a model that was
        not trained here answers in its own labels (an MLflow classifier's), not in class ids."""
        truth = np.asarray(labels).astype(str)
        answers = {"old": np.asarray(old).astype(str), "new": np.asarray(new).astype(str)}
        for name, given in answers.items():
            if given.shape != truth.shape:
                raise ValueError(f"{name} answers have {len(given)} samples but labels have {len(truth)}")
        return cls.of_correct(answers["old"] == truth, answers["new"] == truth)

    @classmethod
    def of_correct(cls, old_correct: np.ndarray, new_correct: np.ndarray) -> FlipCounts:
        """The counts of two boolean vectors, 1[ŷ_old = ℓ] and 1[ŷ_new = ℓ]."""
        return cls(
            n=len(old_correct),
            old_errors=int(np.count_nonzero(~old_correct)),
            new_errors=int(np.count_nonzero(~new_correct)),
            negative=int(np.count_nonzero(old_correct & ~new_correct)),
            positive=int(np.count_nonzero(~old_correct & new_correct)),
        )

    def __add__(self, other: FlipCounts) -> FlipCounts:
        return FlipCounts(*(a + b for a, b in zip(astuple(self), astuple(other))))

    def report(self) -> UpdateReport:
        """ER_old = old_errors / n, ER_new = new_errors / n, NFR = negative / n, PFR = positive / n,
        Rel-NFR = NFR / ((1 − ER_old) · ER_new) (None: undefined)."""
        if self.n == 0:
            raise ValueError("metrics are undefined on an empty set (N = 0)")
        er_old, er_new, nfr = self.old_errors / self.n, self.new_errors / self.n, self.negative / self.n
        return {
            "n": self.n,
            "er_old": er_old,
            "er_new": er_new,
            "nfr": nfr,
            "pfr": self.positive / self.n,
            "rel_nfr": relative_nfr(nfr, er_old, er_new),
        }


def update_report(old: Any, new: Any, labels: Any) -> UpdateReport:
    """JSON-ready summary of one update: n, er_old, er_new, nfr, pfr, rel_nfr (None: undefined)."""
    return FlipCounts.of(old, new, _labels(labels)).report()


def negative_flips(old: Any, new: Any, labels: Any) -> np.ndarray:
    """Indices n of the negative flips, ŷ_old,n = ℓ_n ∧ ŷ_new,n ≠ ℓ_n, in ascending order."""
    truth = _labels(labels)
    return np.flatnonzero(_correct(old, truth, "old predictions") & ~_correct(new, truth, "new predictions"))


def per_class_nfr(old: Any, new: Any, labels: Any, num_classes: int) -> np.ndarray:
    """NFR_c = #{n : ℓ_n = c, negative flip} / #{n : ℓ_n = c} for c < num_classes; NaN for a
    class with no samples. Σ_c NFR_c · N_c / N = NFR."""
    truth = _labels(labels)
    flipped = np.bincount(truth[negative_flips(old, new, truth)], minlength=num_classes)[:num_classes]
    counts = np.bincount(truth, minlength=num_classes)[:num_classes]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, flipped / np.maximum(counts, 1), np.nan)
