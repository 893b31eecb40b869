"""Whether a candidate may replace the champion: the promotion gate (pipelines.operations.PromoteSpec)
over the evidence tracking/promotion.py reads from the registry, as plain records.

- On the eval samples both versions were evaluated on: NFR on the classes the champion knows and the
  ER increase, at their point values or, with `confidence`, at their one-sided upper bounds (Wilson;
  paired Tango score bound: workers/confidence.py), within max_nfr and max_er_increase.
- With max_slice_nfr: every slice of at least min_slice_n samples keeps its NFR (its bound) within it.
- With a protected set: at most max_protected_flips of its samples flipped (protected.py).
- Live: the serving session that shadowed the candidate beside the champion holds at least
  `min_live_pairs` labelled pairs and its live NFR (its bound) is within max_nfr.

Every part says what it measured; the reason is the problems, then what was measured, in one line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from orchestrator.policy.protected import ProtectedEvidence, protected_problems
from pipelines.operations import PromoteSpec
from workers.confidence import fewest_for_bound, paired_increase_upper, wilson_upper
from workers.metrics import negative_flips
from workers.percent import percent, short_percent
from workers.slices import over_limit_words, worst_gated_slice


@dataclass(frozen=True)
class EvalCounts:
    """The candidate against the champion on the eval samples both were evaluated on (by sample id)."""

    n: int  # shared samples
    n_known: int  # of them, of the classes the champion knows
    flips: int  # negative flips among those: champion right, candidate wrong
    worse: int  # champion right, candidate wrong, on all n
    better: int  # champion wrong, candidate right, on all n

    @classmethod
    def of(cls, old: np.ndarray, new: np.ndarray, labels: np.ndarray, known: np.ndarray) -> EvalCounts:
        """Counts of class ids `old` (the champion's) and `new` on `labels`; `known`: the samples
        whose class the champion knows."""
        return cls(
            n=len(labels),
            n_known=int(known.sum()),
            flips=len(negative_flips(old[known], new[known], labels[known])),
            worse=len(negative_flips(old, new, labels)),
            better=len(negative_flips(new, old, labels)),
        )


@dataclass(frozen=True)
class Evidence:
    """What the gate weighs for one candidate against `champion`."""

    champion: str
    eval: EvalCounts
    slices: list[dict[str, Any]] | None = None  # slice rows (workers/slices.py) against the champion; None: not gated
    protected: ProtectedEvidence | None = None  # None: the model has no protected set
    live: Sequence[dict[str, Any]] | None = None  # the model's serving sessions' summaries; None: not gated live


@dataclass(frozen=True)
class Verdict:
    passed: bool
    reason: str
    champion: str | None  # the version gated against (None: there was no champion)


def first_champion(name: str) -> Verdict:
    """A model without a champion takes any version as its first."""
    return Verdict(True, f"{name} has no champion yet", None)


def _pct(value: float, signed: bool = False) -> str:
    return f"{100 * value:+.2f} pt" if signed else percent(value)


def decide(candidate: str, evidence: Evidence, gate: PromoteSpec, level: float) -> Verdict:
    """The gate's verdict on `evidence` (module docstring); `level`: the confidence of the bounds
    shown and of the live gate's fewest pairs when the gate sets none."""
    problems, shown = eval_problems(evidence.eval, gate)
    against = f"against champion v{evidence.champion} on {evidence.eval.n:,} shared eval samples: {shown}"
    parts = []
    if evidence.slices is not None:
        parts.append(slice_problems(evidence.slices, gate))
    if evidence.protected is not None:
        parts.append(protected_problems(evidence.protected, gate.max_protected_flips))
    if evidence.live is not None:
        parts.append(live_problems(evidence.live, evidence.champion, candidate, gate, level))
    for found, measured in parts:
        problems += found
        against += f"; {measured}"
    reason = "; ".join(problems) + f" ({against})" if problems else against
    return Verdict(not problems, reason, evidence.champion)


def eval_problems(counts: EvalCounts, gate: PromoteSpec) -> tuple[list[str], str]:
    """NFR and the ER increase on the shared eval samples (their upper bounds with `confidence`)
    against the limits; (problems, what was measured)."""
    nfr, increase = counts.flips / max(counts.n_known, 1), (counts.worse - counts.better) / max(counts.n, 1)
    gated_nfr, gated_increase = nfr, increase
    shown_nfr, shown_increase = _pct(nfr), _pct(increase, signed=True)
    if gate.confidence is not None:
        level = short_percent(gate.confidence)
        gated_nfr = wilson_upper(counts.flips, counts.n_known, gate.confidence)
        gated_increase = paired_increase_upper(counts.worse, counts.better, counts.n, gate.confidence)
        shown_nfr += f" (upper {level} bound {_pct(gated_nfr)})"
        shown_increase += f" (upper {level} bound {_pct(gated_increase, signed=True)})"
    problems = []
    if gated_nfr > gate.max_nfr:
        problems.append(f"NFR {_pct(gated_nfr)} > {_pct(gate.max_nfr)}")
    if gated_increase > gate.max_er_increase:
        problems.append(f"ER increase {_pct(gated_increase, signed=True)} > {_pct(gate.max_er_increase, signed=True)}")
    return problems, f"NFR {shown_nfr}, ER {shown_increase}"


def slice_problems(rows: list[dict[str, Any]], gate: PromoteSpec) -> tuple[list[str], str]:
    """The slice gate (workers/slices.py): each slice row with at least `min_slice_n` samples keeps
    its NFR (its Wilson upper bound with `confidence`) within `max_slice_nfr`; (problems, what was found)."""
    assert gate.max_slice_nfr is not None
    on_bound = gate.confidence is not None
    worst = worst_gated_slice(rows, gate.max_slice_nfr, on_bound)
    gated = [r for r in rows if r["gated"]]
    if not gated:
        return [], f"no slice of {gate.min_slice_n}+ samples to gate"
    key, bound = ("nfr_upper", " upper bound") if on_bound else ("nfr", "")
    top = worst or max(gated, key=lambda r: r[key])
    shown = f"worst slice {top['column']}={top['value']}: NFR{bound} {_pct(top[key])} on {top['n']:,}"
    if worst is None:
        return [], f"{shown} ({len(gated)} slices gated)"
    return [f"slice {over_limit_words(top, gate.max_slice_nfr, on_bound)}"], shown


def min_live_pairs(gate: PromoteSpec, level: float) -> int:
    """The labelled live pairs a live gate asks for: `min_live` when given, else the fewest at which
    the Wilson upper bound of NFR (at `confidence`, else `level`) can be within `max_nfr`
    (confidence.py `fewest_for_bound`): without it, one labelled pair that did not flip passes a
    point-value gate."""
    if gate.min_live is not None:
        return gate.min_live
    if gate.max_nfr <= 0:
        return 1  # nothing can be shown ≤ 0 by a bound: the point value gates, on at least one pair
    return fewest_for_bound(gate.max_nfr, gate.confidence or level)


def live_problems(
    sessions: Sequence[dict[str, Any]], champion: str, candidate: str, gate: PromoteSpec, level: float
) -> tuple[list[str], str]:
    """The live evidence (tracking/live.py summaries): the serving session that shadowed `candidate`
    beside `champion`, running or ended (a restart continues it; of several, the one with the most
    labelled pairs, so an empty newer one hides nothing), with at least `min_live_pairs` labelled
    pairs; its NFR on them (with `confidence`, its Wilson upper bound) against `max_nfr`; (problems,
    what was measured)."""
    pair = [s for s in sessions if (s["champion"], s["candidate"]) == (champion, candidate)]
    if not pair:
        return [f"no serving session shadowed v{candidate} beside champion v{champion}"], "live: none"
    refused = [s["problem"] for s in pair if s.get("problem")]
    if refused:  # its chunks are not the ones its ledger wrote (tracking/live_chain.py)
        return refused[:1], "live: refused"
    session = max(pair, key=lambda s: s["labelled"])
    fewest = min_live_pairs(gate, level)
    if session["labelled"] < fewest:
        why = "--min-live"
        if gate.min_live is None and gate.max_nfr > 0:
            shown_level = short_percent(gate.confidence or level)
            why = f"--min-live; the fewest whose {shown_level} Wilson bound can be ≤ {_pct(gate.max_nfr)}"
        problem = (
            f"{session['labelled']:,} labelled live pairs ({session['pairs']:,} shadowed), fewer than the "
            f"{fewest:,} the live gate asks ({why})"
        )
        return [problem], f"live: {session['labelled']:,} labelled"
    gated = session["nfr_upper"] if gate.confidence is not None else session["nfr"]
    shown = _pct(session["nfr"])
    if gate.confidence is not None:
        shown += f" (upper {short_percent(gate.confidence)} bound {_pct(gated)})"
    measured = f"live NFR {shown} on {session['labelled']:,} labelled of {session['pairs']:,} shadowed requests"
    return ([f"live NFR {_pct(gated)} > {_pct(gate.max_nfr)}"] if gated > gate.max_nfr else []), measured
