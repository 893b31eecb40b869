"""Choosing among trained candidates: the ER–NFR Pareto front and the pick rule of a search."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
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
    on), on the regression-eval split (shown only, filled after the choice), its cost and checkpoint."""

    name: str
    val_error_rate: float
    val_nfr: float
    seconds: float
    checkpoint: str
    eligible: bool = False
    error_rate: float | None = None
    nfr: float | None = None
    val_slice_over: str | None = None  # its worst val slice over the spec's max_slice_nfr, as the gate says it
    val_er_se: float | None = None  # the paired standard error of its val ER − no treatment's (none: None)


def choose_candidate(candidates: list[CandidateScore], max_er_increase: float) -> CandidateScore:
    """The lowest val NFR among the candidates whose val ER ≤ no treatment's val ER + `max_er_increase`
    and that have no val slice over the slice gate (`val_slice_over`); no treatment, the candidate
    named "none", always qualifies; ties: lower val ER, then order. Each candidate's `eligible` set.
    Only val figures are read."""
    reference = next(c for c in candidates if c.name == "none").val_error_rate
    for c in candidates:
        within = c.val_error_rate <= reference + max_er_increase and c.val_slice_over is None
        c.eligible = c.name == "none" or within
    eligible = [i for i, c in enumerate(candidates) if c.eligible]  # no treatment, whatever the limit
    return candidates[min(eligible, key=lambda i: (candidates[i].val_nfr, candidates[i].val_error_rate, i))]
