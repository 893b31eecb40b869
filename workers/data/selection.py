"""Which samples of a split a spec uses — `subset`, `train_limit`, `eval_limit` — as filters of each
sample's id and label alone (workers/data/keys.py), so a held split and a stream's reading tasks
apply the same ones and a sample's membership never depends on how the data was read or sorted.

- `half-classes`: the samples whose label is below ⌈C/2⌉ (the class list stays whole);
- `half-samples`: the samples whose rank(id, HALF_SEED) falls in the lower half of the 64-bit
  range: each class keeps about half its samples (binomial, not exactly ⌈n/2⌉);
- a limit N: the samples whose rank(id, LIMIT_SEED) is at most the N-th lowest of the split (after
  the subset): exactly N, or a few more where copies of a text share an id.

numpy only: Ray Data's reading tasks import it without torch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from workers.data.keys import EVAL, HALF_SEED, LIMIT_SEED, TRAIN, rank
from workers.errors import DataError

SUBSETS = ("all", "half-classes", "half-samples")
HALF = np.uint64(1 << 63)


@dataclass(frozen=True)
class Selection:
    """The filters of one split: `classes_below` (half-classes), `half` (half-samples), and
    `highest_rank` (a limit: the largest rank kept, a uint64 as int; None: no limit)."""

    classes_below: int | None = None
    half: bool = False
    highest_rank: int | None = None

    def mask(self, ids: np.ndarray, labels: np.ndarray) -> np.ndarray:
        """bool per sample: kept by every filter."""
        keep = np.ones(len(ids), dtype=bool)
        if self.classes_below is not None:
            keep &= np.asarray(labels) < self.classes_below
        if self.half:
            keep &= rank(ids, HALF_SEED) < HALF
        if self.highest_rank is not None:
            keep &= rank(ids, LIMIT_SEED) <= np.uint64(self.highest_rank)
        return keep

    def limited(self, ids: np.ndarray, limit: int) -> Selection:
        """This selection with the limit that keeps the `limit` lowest-ranked of `ids` (the split's
        ids this selection already keeps)."""
        ranks = np.sort(rank(ids, LIMIT_SEED))
        return Selection(self.classes_below, self.half, int(ranks[limit - 1]))


ALL = Selection()  # every sample


def subset_selection(subset: str, num_classes: int) -> Selection:
    """The filters of `subset` (SUBSETS) for a split of `num_classes` classes."""
    if subset == "all":
        return Selection()
    if subset == "half-classes":
        return Selection(classes_below=(num_classes + 1) // 2)
    if subset == "half-samples":
        return Selection(half=True)
    raise ValueError(f"subset must be one of {', '.join(SUBSETS)}, got {subset!r}")


LIMIT_WORDS = {TRAIN: ("train_limit", "training samples"), EVAL: ("eval_limit", "regression-eval samples")}


def split_selection(
    code: int, subset: str, num_classes: int, limit: int | None, ids: np.ndarray, labels: np.ndarray, source: object
) -> Selection:
    """What one split (`code`, keys.py) keeps of its samples (`ids`, `labels`): train and val the
    `subset`, train and eval their `limit` (the limit-lowest ranks of what the subset keeps; None:
    no limit). The one rule a held split, a table stream and an image stream apply. DataError when
    the limit is above what the split holds."""
    chosen = subset_selection(subset, num_classes) if code != EVAL else ALL
    if limit is None:
        return chosen
    kept = chosen.mask(ids, labels)
    if limit > int(kept.sum()):
        what, words = LIMIT_WORDS[code]
        of_subset = f" of subset {subset}" if subset != "all" and code != EVAL else ""
        raise DataError(f"{source}: {what} {limit} is above the {int(kept.sum())} {words}{of_subset}")
    return chosen.limited(ids[kept], limit)
