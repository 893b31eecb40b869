"""Choosing among trained candidates: the ER–NFR Pareto front and the pick rule of a search."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypedDict


class Scored(TypedDict):
    """What a candidate needs to be chosen: its error rate and NFR (a Tune trial has more keys)."""

    error_rate: float
    nfr: float


def pareto_front(rows: Sequence[Scored]) -> list[int]:
    """Indices of the rows no other row dominates on (error_rate, nfr), both minimised: row j
    dominates row i when it is no worse on both and better on one. Sorted by error rate."""
    front = []
    for i, a in enumerate(rows):
        dominated = any(
            b["error_rate"] <= a["error_rate"]
            and b["nfr"] <= a["nfr"]
            and (b["error_rate"] < a["error_rate"] or b["nfr"] < a["nfr"])
            for j, b in enumerate(rows)
            if j != i
        )
        if not dominated:
            front.append(i)
    return sorted(front, key=lambda i: (rows[i]["error_rate"], rows[i]["nfr"]))


def pick_trial(rows: Sequence[Scored], reference_error_rate: float, tolerance: float) -> int | None:
    """The lowest-NFR row among those with error_rate ≤ reference + tolerance (ties: lower ER,
    then order); None when no row qualifies."""
    eligible = [i for i, r in enumerate(rows) if r["error_rate"] <= reference_error_rate + tolerance]
    if not eligible:
        return None
    return min(eligible, key=lambda i: (rows[i]["nfr"], rows[i]["error_rate"], i))


@dataclass
class CandidateScore:
    """One candidate of `method: auto`: its scores against the old model on the val split (chosen
    on), its test against no treatment there (orchestrator/policy/auto_choice.py: the ER change and
    the NFR change with their one-sided upper bounds, whether the fixed order reached it and what
    failed), on the regression-eval split (shown only, filled after the choice), its cost and
    checkpoint."""

    name: str
    val_error_rate: float
    val_nfr: float
    seconds: float
    checkpoint: str
    eligible: bool = False  # proven (no treatment: always)
    error_rate: float | None = None
    nfr: float | None = None
    val_slice_over: str | None = None  # its worst val slice over the spec's max_slice_nfr, as the gate says it
    val_er_change: float | None = None  # val ER − no treatment's (none: None)
    val_er_upper: float | None = None  # its one-sided upper bound
    val_nfr_change: float | None = None  # val NFR − no treatment's
    val_nfr_upper: float | None = None  # its one-sided upper bound
    tested: bool = True  # False: the fixed order stopped before it
    evidence: str = "val samples"  # what its test counted: the val split, or every labelled sample in K folds
    failed: list[str] = field(default_factory=list)  # the tests it failed
