"""The protected set's counts (orchestrator/tracking/protected.py reads the set and scores a version
on it): how many samples a version gets right, and against another version how many that one got
right and it gets wrong — protected flips, which the promotion gate (promotion.py) limits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class ProtectedCounts:
    """A version on the protected set: n, how many it gets right, and against another version how
    many that one got right and it gets wrong (protected flips)."""

    n: int
    correct: int
    flipped: int | None = None  # None: no version to compare against

    def row(self) -> dict[str, Any]:
        return {"n": self.n, "correct": self.correct, "flipped": self.flipped}


def protected_counts(labels: np.ndarray, new: np.ndarray, old: np.ndarray | None = None) -> ProtectedCounts:
    """Counts of `new`'s answers (and flips against `old`'s) on protected `labels`."""
    right = new == labels
    flipped = None if old is None else int(np.count_nonzero((old == labels) & ~right))
    return ProtectedCounts(len(labels), int(np.count_nonzero(right)), flipped)


@dataclass(frozen=True)
class ProtectedEvidence:
    """The candidate on the model's current protected set (version `set_version`), flips counted
    against the champion's answers."""

    set_version: int
    counts: ProtectedCounts


def protected_problems(evidence: ProtectedEvidence, max_flips: int) -> tuple[list[str], str]:
    """At most `max_flips` protected samples the champion gets right may the candidate get wrong;
    (problems, what was found)."""
    counts = evidence.counts
    shown = f"protected set {evidence.set_version}: {counts.flipped} of {counts.n} flipped, {counts.correct} right"
    if counts.flipped is not None and counts.flipped > max_flips:
        return [f"{counts.flipped} protected samples flipped > {max_flips} allowed"], shown
    return [], shown
