"""`method: auto`'s choice: a candidate ships only when it is proven no worse than no treatment by
more than `max_er_increase` and proven to flip less, on samples it was not chosen on.

For each candidate c against no treatment (none), on the same samples, the old model fixed:

- ER non-inferiority: of the n samples, b = none right and c wrong, c' = none wrong and c right; the
  one-sided upper bound at `confidence` of ER_c − ER_none = (b − c')/n (Tango's paired score bound,
  the one the promotion gate uses: workers/confidence.py) must be ≤ `max_er_increase`.
- NFR superiority: on the n_k samples of classes the old model knows, f = flips by c and not by
  none, f' = flips by none and not by c; the upper bound of NFR_c − NFR_none = (f − f')/n_k (the
  same bound) must be < 0.

A candidate passes when both hold (an intersection–union test: level `confidence` with no
correction). Candidates are tested in a fixed order set before any is scored and the testing stops
at the first that fails (fixed-sequence testing; Maurer et al. 1995, as Learn-then-Test uses it,
Angelopoulos et al. 2025): the first candidate whose claim is false must pass its own test for any
false claim to be accepted after it, so the chance of shipping a candidate that is truly over the
bound or flips no less stays ≤ 1 − `confidence` over the whole family. Among those that passed the
largest NFR cut against no treatment ships; when none passed, no treatment ships and `closest` says which candidate came
nearest and by how much.

Counts pooled over cross-fitted folds are not independent samples (each fold's model trained on
the others'); `design_effect` ≥ 1 divides every count before the bound (the effective sample size
n / design_effect; workers/confidence.py `corrected_resampled_effect`), and `effective` makes them
poolable with the val split's counts of the shipped candidates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from workers.confidence import paired_increase_upper
from workers.metrics import negative_flips

AUTO_CONFIDENCE = 0.95  # the one-sided level of both tests (the family's, by fixed-sequence testing)


@dataclass(frozen=True)
class PairedCounts:
    """A candidate against no treatment on the same samples, the old model fixed (module docstring)."""

    n: float  # samples both were scored on (float: effective counts, `effective`)
    worse: float  # no treatment right, the candidate wrong
    better: float  # no treatment wrong, the candidate right
    n_known: float  # of them, of the classes the old model knows
    flips: float  # the candidate's negative flips against the old model, on those
    none_flips: float  # no treatment's
    more_flips: float  # flipped by the candidate and not by no treatment
    fewer_flips: float  # flipped by no treatment and not by the candidate
    design_effect: float = 1.0  # ≥ 1: the variance inflation of pooled out-of-fold counts

    @classmethod
    def of(
        cls, old: np.ndarray, none: np.ndarray, new: np.ndarray, labels: np.ndarray, known: np.ndarray
    ) -> PairedCounts:
        """Counts from class ids of the old model, no treatment and the candidate on `labels`;
        `known`: the samples whose class the old model knows."""
        candidate_flips = (old == labels) & (new != labels) & known
        none_flips = (old == labels) & (none != labels) & known
        return cls(
            n=len(labels),
            worse=len(negative_flips(none, new, labels)),
            better=len(negative_flips(new, none, labels)),
            n_known=int(known.sum()),
            flips=int(candidate_flips.sum()),
            none_flips=int(none_flips.sum()),
            more_flips=int((candidate_flips & ~none_flips).sum()),
            fewer_flips=int((none_flips & ~candidate_flips).sum()),
        )

    def __add__(self, other: PairedCounts) -> PairedCounts:
        """Counts of two disjoint sets of samples (cross-fitted folds), pooled."""
        if self.design_effect != other.design_effect:
            raise ValueError("pooled counts share one design effect")
        fields = ("n", "worse", "better", "n_known", "flips", "none_flips", "more_flips", "fewer_flips")
        pooled = {f: getattr(self, f) + getattr(other, f) for f in fields}
        return PairedCounts(**pooled, design_effect=self.design_effect)

    def effective(self) -> PairedCounts:
        """These counts over their design effect, as as many independent samples (design effect 1):
        what pooling them with counts of another design takes."""
        return self.scaled(1 / self.design_effect)

    def scaled(self, factor: float) -> PairedCounts:
        """These counts' proportions on `factor` times as many independent samples (design effect 1)."""
        fields = ("n", "worse", "better", "n_known", "flips", "none_flips", "more_flips", "fewer_flips")
        return PairedCounts(**{f: getattr(self, f) * factor for f in fields})

    @property
    def er_change(self) -> float:
        """ER_candidate − ER_none = (b − c')/n."""
        return (self.worse - self.better) / max(self.n, 1)

    @property
    def nfr(self) -> float:
        return self.flips / max(self.n_known, 1)

    @property
    def nfr_change(self) -> float:
        """NFR_candidate − NFR_none = (f − f')/n_k."""
        return (self.more_flips - self.fewer_flips) / max(self.n_known, 1)

    def er_change_upper(self, confidence: float) -> float:
        """The one-sided upper bound of ER_candidate − ER_none (Tango's, on n / design_effect)."""
        d = self.design_effect
        return paired_increase_upper(self.worse / d, self.better / d, self.n / d, confidence)

    def nfr_change_upper(self, confidence: float) -> float:
        """The one-sided upper bound of NFR_candidate − NFR_none (Tango's, on n_k / design_effect)."""
        d = self.design_effect
        return paired_increase_upper(self.more_flips / d, self.fewer_flips / d, self.n_known / d, confidence)


@dataclass(frozen=True)
class CandidateTest:
    """One candidate's test: its bounds, what failed (empty: it passed), or why it was not tested."""

    name: str
    er_change: float
    er_upper: float
    nfr_change: float
    nfr_upper: float
    n: float
    failed: tuple[str, ...] = ()
    tested: bool = True
    where: str = "val samples"  # the samples counted: "val samples", "labelled samples in K folds"

    @property
    def passed(self) -> bool:
        return self.tested and not self.failed


def candidate_test(
    name: str,
    counts: PairedCounts,
    max_er_increase: float,
    confidence: float,
    slice_over: str | None = None,
    where: str = "val samples",
) -> CandidateTest:
    """Both tests of the module docstring on `counts`; a val slice over the slice gate fails it too."""
    er_upper, nfr_upper = counts.er_change_upper(confidence), counts.nfr_change_upper(confidence)
    failed = []
    if er_upper > max_er_increase:
        failed.append(f"ER bound {100 * er_upper:+.2f} pt > {100 * max_er_increase:+.2f}")
    if nfr_upper >= 0:
        failed.append(f"NFR not proven lower (bound {100 * nfr_upper:+.2f} pt ≥ 0)")
    if slice_over is not None:
        failed.append(f"val slice {slice_over}")
    changes = (counts.er_change, er_upper, counts.nfr_change, nfr_upper)
    return CandidateTest(name, *changes, counts.n, tuple(failed), where=where)


def futile(
    counts: PairedCounts, more: float, max_er_increase: float, confidence: float, slice_over: str | None = None
) -> tuple[str, ...]:
    """What a candidate failing its test on `counts` would still fail with `more` effective samples
    at the same proportions (the folds' evidence, had it agreed with val's): its test on the counts
    scaled by (n + more) / n. Empty when it passes on `counts` or scaled: more samples could prove
    it. A futility stop: leaving out the evidence of a candidate that then fails never ships one, so
    the family's level holds."""
    if candidate_test("", counts, max_er_increase, confidence, slice_over).passed:
        return ()
    now = counts.effective()
    projected = now.scaled((now.n + more) / max(now.n, 1))
    return candidate_test("", projected, max_er_increase, confidence, slice_over).failed


def fixed_sequence(
    ordered: Sequence[tuple[str, PairedCounts, str | None] | tuple[str, PairedCounts, str | None, str]],
    max_er_increase: float,
    confidence: float,
) -> list[CandidateTest]:
    """Each candidate's test in the given order, (name, counts, its val slice over the gate or None
    [, which samples were counted]), up to and with the first that fails; those after it are not
    tested (their bounds still shown)."""
    tests, stopped = [], False
    for name, counts, slice_over, *where in ordered:
        test = candidate_test(name, counts, max_er_increase, confidence, slice_over, *where)
        tests.append(test if not stopped else _untested(test))
        stopped = stopped or not test.passed
    return tests


def _untested(test: CandidateTest) -> CandidateTest:
    return CandidateTest(**{**test.__dict__, "failed": (), "tested": False})


def choose(tests: Sequence[CandidateTest]) -> str:
    """The largest NFR cut against no treatment (the lowest NFR − no treatment's, on the samples each
    was counted on) among the candidates that passed (ties: the earlier in the order); "none" (no
    treatment) when none passed."""
    passed = [t for t in tests if t.passed]
    return min(passed, key=lambda t: (t.nfr_change, passed.index(t))).name if passed else "none"


def closest(tests: Sequence[CandidateTest], max_er_increase: float) -> str | None:
    """When no candidate passed: the one whose ER bound came nearest the limit among those whose NFR
    fell, else nearest of all, as one line ("kd: ER +0.12 pt, bound +0.41 > +0.30 over 4,350 val
    samples; stopped the fixed order"); None when one passed."""
    if not tests or any(t.passed for t in tests):
        return None
    lower = [t for t in tests if t.nfr_change < 0] or list(tests)
    best = min(lower, key=lambda t: (t.er_upper - max_er_increase, t.nfr_upper))
    words = (
        f"{best.name} came closest: ER {100 * best.er_change:+.2f} pt, bound {100 * best.er_upper:+.2f} "
        f"{'>' if best.er_upper > max_er_increase else '≤'} {100 * max_er_increase:+.2f}; NFR "
        f"{100 * best.nfr_change:+.2f} pt against no treatment's, bound {100 * best.nfr_upper:+.2f} over "
        f"{best.n:,.0f} {best.where}"
    )
    stopper = next((t for t in tests if t.tested and t.failed), None)
    if stopper is not None and stopper.name != best.name:
        words += f" (not tested: {stopper.name} failed first in the fixed order)" if not best.tested else ""
    return words
