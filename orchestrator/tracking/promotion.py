"""Moving alias `champion`: the gate, and a compare-and-set that holds when promotions race.

The gate compares a candidate with the version `champion` points to, from their ledgers, on the eval
samples both were evaluated on (matched by sample id, ledger.py): NFR on
the classes the champion knows and the ER increase, against the limits, at their point values or,
with a confidence level, at their one-sided upper bounds (workers/confidence.py).

MLflow's registry has no conditional alias update (`set_registered_model_alias` overwrites), so
two promotions that each read `champion` → v1 could each pass against v1, and the later write would
replace the version the other had just promoted, never checked against it. `promote` therefore:

1. gates the candidate against the champion it reads (ledger downloads: outside any lock);
2. takes the model's promotion lock, reads `champion` again and moves it only if it still points
   where the gate read it; otherwise it lets go of the lock and gates again against the new
   champion, at most ATTEMPTS times, then refuses in one line.

The lock is the model's `promotion` lock in the registry itself (locks.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from orchestrator.tracking import descriptions
from orchestrator.tracking.ledger import COMPARED, LedgerMismatch, known_mask, shared_samples
from orchestrator.tracking.live import live_summaries
from orchestrator.tracking.locks import registry_lock
from orchestrator.tracking.protected import ProtectedSet, protected_counts, protected_set, set_answers
from orchestrator.tracking.registry import chain, checkpoint_of, ledger_of, resolve
from orchestrator.tracking.slice_figures import SLICED, pair_slice_rows
from orchestrator.tracking.version_record import SHOWN_CONFIDENCE
from orchestrator.tracking.version_refs import RegistryError, VersionRef
from workers.confidence import fewest_for_bound, paired_increase_upper, wilson_upper
from workers.metrics import negative_flips
from workers.percent import percent
from workers.slices import MIN_SLICE_N, over_limit_words, worst_gated_slice

ATTEMPTS = 3  # gates against a champion that moved meanwhile, before refusing


@dataclass(frozen=True)
class GateLimits:
    """NFR ≤ max_nfr and ER − ER_champion ≤ max_er_increase (fractions); with `confidence`, their
    upper bounds at that level must be within the limits."""

    max_nfr: float
    max_er_increase: float = 0.0
    confidence: float | None = None
    live: bool = False  # also the live ledger: NFR on the labelled live pairs (`live_problems`)
    min_live: int | None = None  # labelled live pairs asked for (None: `min_live_pairs`)
    max_slice_nfr: float | None = None  # every gated slice's NFR (its bound with `confidence`) within it
    min_slice_n: int = MIN_SLICE_N  # samples a slice needs to be gated
    max_protected_flips: int = 0  # protected samples (protected.py) the champion gets right and it may get wrong


def min_live_pairs(limits: GateLimits) -> int:
    """The labelled live pairs `--live` asks for: `min_live` when given, else the fewest at which the
    Wilson upper bound of NFR (at `confidence`, else the level `versions` shows) can be within
    `max_nfr` (confidence.py `fewest_for_bound`): without it, one labelled pair that did not flip
    passes a point-value gate."""
    if limits.min_live is not None:
        return limits.min_live
    if limits.max_nfr <= 0:
        return 1  # nothing can be shown ≤ 0 by a bound: the point value gates, on at least one pair
    return fewest_for_bound(limits.max_nfr, limits.confidence or SHOWN_CONFIDENCE)


@dataclass(frozen=True)
class Verdict:
    passed: bool
    reason: str
    champion: str | None  # the version gated against (None: there was no champion)


def champion_of(name: str) -> str | None:
    """The version alias `champion` points to; None if the model has no champion or does not exist.
    Any other failure to read it raises RegistryError: a gate that cannot see the champion fails
    closed instead of passing as if there were none."""
    try:
        model = MlflowClient().get_registered_model(name)
    except MlflowException as e:
        if e.error_code == "RESOURCE_DOES_NOT_EXIST":
            return None
        reason = str(e.message).splitlines()[0] if e.message else e.error_code
        raise RegistryError(f"{name}: cannot read its champion from the registry ({reason}); not promoted") from None
    version = model.aliases.get("champion")
    return None if version is None else str(version)


def _pct(value: float, signed: bool = False) -> str:
    return f"{100 * value:+.2f} pt" if signed else percent(value)


def gate(name: str, candidate: str, limits: GateLimits) -> Verdict:
    """Whether `candidate` may replace the current champion (module docstring); without a champion
    it passes."""
    champion = champion_of(name)
    if champion is None:
        return Verdict(True, f"{name} has no champion yet", None)
    sliced = limits.max_slice_nfr is not None
    new = ledger_of(VersionRef(name, candidate), SLICED if sliced else COMPARED)
    old = ledger_of(VersionRef(name, champion), COMPARED)
    try:  # counted on the eval samples both were evaluated on, matched by id
        in_old, in_new = shared_samples(old, new, (f"champion v{champion}", f"v{candidate}"))
    except LedgerMismatch as e:
        raise RegistryError(f"{name}: {e}") from None
    if len(in_new) == 0:
        raise RegistryError(f"{name} v{candidate} and champion v{champion} share no eval sample: no flips to gate on")
    labels = new["labels"][in_new]
    old_ids, new_ids = old["class_ids"][in_old], new["class_ids"][in_new]
    known = known_mask(old, labels)  # flips on the classes the champion knows
    flips = len(negative_flips(old_ids[known], new_ids[known], labels[known]))
    worse = len(negative_flips(old_ids, new_ids, labels))  # old right, new wrong
    better = len(negative_flips(new_ids, old_ids, labels))  # old wrong, new right
    n_known, n = int(known.sum()), len(labels)
    nfr, increase = flips / max(n_known, 1), (worse - better) / max(n, 1)
    gated_nfr, gated_increase = nfr, increase
    shown_nfr, shown_increase = _pct(nfr), _pct(increase, signed=True)
    if limits.confidence is not None:
        level = f"{100 * limits.confidence:g} %"
        gated_nfr = wilson_upper(flips, n_known, limits.confidence)
        gated_increase = paired_increase_upper(worse, better, n, limits.confidence)
        shown_nfr += f" (upper {level} bound {_pct(gated_nfr)})"
        shown_increase += f" (upper {level} bound {_pct(gated_increase, signed=True)})"
    problems = []
    if gated_nfr > limits.max_nfr:
        problems.append(f"NFR {_pct(gated_nfr)} > {_pct(limits.max_nfr)}")
    if gated_increase > limits.max_er_increase:
        limit = _pct(limits.max_er_increase, signed=True)
        problems.append(f"ER increase {_pct(gated_increase, signed=True)} > {limit}")
    against = f"against champion v{champion} on {n:,} shared eval samples: NFR {shown_nfr}, ER {shown_increase}"
    if sliced:
        slice_problem, slice_shown = slice_gate(name, candidate, old, new, limits)
        problems += slice_problem
        against += f"; {slice_shown}"
    suite = protected_set(name)
    if suite is not None and len(suite):
        suite_problems, suite_shown = protected_gate(name, candidate, champion, suite, limits)
        problems += suite_problems
        against += f"; {suite_shown}"
    if limits.live:
        live_problems, live_against = live_gate(name, candidate, champion, limits)
        problems += live_problems
        against += f"; {live_against}"
    reason = "; ".join(problems) + f" ({against})" if problems else against
    return Verdict(not problems, reason, champion)


def slice_gate(name: str, candidate: str, old: dict, new: dict, limits: GateLimits) -> tuple[list[str], str]:
    """The slice gate (workers/slices.py): on the shared samples of the classes the champion knows,
    each slice of the candidate's ledger with at least `min_slice_n` samples must keep its NFR (its
    Wilson upper bound with `confidence`) within `max_slice_nfr`; (problems, what was found)."""
    assert limits.max_slice_nfr is not None
    if not new.get("slices"):
        raise RegistryError(
            f"{name} v{candidate}'s ledger holds no slices (its spec named no data.slice_columns nor data.slices): "
            "no slice to gate"
        )
    rows = pair_slice_rows(old, new, limits.confidence or SHOWN_CONFIDENCE, limits.min_slice_n)
    on_bound = limits.confidence is not None
    worst = worst_gated_slice(rows, limits.max_slice_nfr, on_bound)
    gated = [r for r in rows if r["gated"]]
    if not gated:
        return [], f"no slice of {limits.min_slice_n}+ samples to gate"
    key, bound = ("nfr_upper", " upper bound") if on_bound else ("nfr", "")
    top = worst or max(gated, key=lambda r: r[key])
    shown = f"worst slice {top['column']}={top['value']}: NFR{bound} {_pct(top[key])} on {top['n']:,}"
    if worst is None:
        return [], f"{shown} ({len(gated)} slices gated)"
    return [f"slice {over_limit_words(top, limits.max_slice_nfr, on_bound)}"], shown


def protected_gate(
    name: str, candidate: str, champion: str, suite: ProtectedSet, limits: GateLimits
) -> tuple[list[str], str]:
    """The protected set (protected.py): the candidate may get at most `max_protected_flips` of its
    samples wrong that the champion gets right; both scored from their registered checkpoints."""
    new = set_answers(checkpoint_of(VersionRef(name, candidate)), suite)
    old = set_answers(checkpoint_of(VersionRef(name, champion)), suite)
    counts = protected_counts(suite.labels, new, old)
    shown = f"protected set {suite.version}: {counts.flipped} of {counts.n} flipped, {counts.correct} right"
    if counts.flipped is not None and counts.flipped > limits.max_protected_flips:
        return [f"{counts.flipped} protected samples flipped > {limits.max_protected_flips} allowed"], shown
    return [], shown


def live_gate(name: str, candidate: str, champion: str, limits: GateLimits) -> tuple[list[str], str]:
    """The live evidence (tracking/live.py): the serving session that shadowed `candidate` beside
    `champion`, running or ended (a restart continues it; of several, the one with the most labelled
    pairs, so an empty newer one hides nothing), with at least `min_live_pairs` labelled pairs; its
    NFR on them (at `confidence`, its Wilson upper bound) against `max_nfr`; its problems (none:
    passed) and what it measured."""
    summaries = live_summaries(name, limits.confidence or SHOWN_CONFIDENCE)
    sessions = [s for s in summaries if (s["champion"], s["candidate"]) == (champion, candidate)]
    if not sessions:
        return [f"no serving session shadowed v{candidate} beside champion v{champion}"], "live: none"
    session = max(sessions, key=lambda s: s["labelled"])
    fewest = min_live_pairs(limits)
    if session["labelled"] < fewest:
        why = "--min-live"
        if limits.min_live is None and limits.max_nfr > 0:
            level = 100 * (limits.confidence or SHOWN_CONFIDENCE)
            why = f"--min-live; the fewest whose {level:g} % Wilson bound can be ≤ {_pct(limits.max_nfr)}"
        problem = (
            f"{session['labelled']:,} labelled live pairs ({session['pairs']:,} shadowed), fewer than the "
            f"{fewest:,} the live gate asks ({why})"
        )
        return [problem], f"live: {session['labelled']:,} labelled"
    gated = session["nfr_upper"] if limits.confidence is not None else session["nfr"]
    shown = _pct(session["nfr"])
    if limits.confidence is not None:
        shown += f" (upper {100 * limits.confidence:g} % bound {_pct(gated)})"
    measured = f"live NFR {shown} on {session['labelled']:,} labelled of {session['pairs']:,} shadowed requests"
    return ([f"live NFR {_pct(gated)} > {_pct(limits.max_nfr)}"] if gated > limits.max_nfr else []), measured


def set_champion(name: str, version: str) -> None:
    """Move alias `champion` to an existing version, unconditionally (`promote` is the gated,
    race-safe way); RegistryError if there is no such version."""
    resolve(f"{name}/{version}")
    MlflowClient().set_registered_model_alias(name, "champion", version)
    descriptions.describe(name, chain(name))  # the champion marked in the model's description


def promote(name: str, candidate: str, limits: GateLimits) -> Verdict:
    """Move `champion` to `candidate` if it passes the gate against the champion it replaces, as
    a compare-and-set (module docstring); the verdict says why, and against which version."""
    resolve(f"{name}/{candidate}")
    for _ in range(ATTEMPTS):
        verdict = gate(name, candidate, limits)
        if not verdict.passed:
            return verdict
        with registry_lock(name, "promotion") as lease:
            if champion_of(name) == verdict.champion:
                lease.check()  # fencing: this promotion still holds the lock (locks.py)
                set_champion(name, candidate)
                return verdict
    raise RegistryError(f"{name}: champion moved {ATTEMPTS} times while v{candidate} was gated; not promoted")
