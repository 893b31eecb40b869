"""Moving alias `champion`: the gate, and a compare-and-set that holds when promotions race.

The gate compares a candidate with the version `champion` points to, from their ledgers, on the eval
samples both were evaluated on (matched by sample id, ledger.py): NFR on
the classes the champion knows and the ER increase, against the limits, at their point values or,
with a confidence level, at their one-sided upper bounds (workers/confidence.py). This module reads
that evidence from the registry (ledgers, slices, the protected set, serving sessions) and moves the
alias; the decision is orchestrator/policy/promotion.py's, on plain records.

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

from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from orchestrator.policy.promotion import EvalCounts, Evidence, Verdict, decide, first_champion
from orchestrator.policy.protected import ProtectedEvidence, protected_counts
from orchestrator.tracking import descriptions
from orchestrator.tracking.ledger import COMPARED, LedgerMismatch, known_mask, shared_samples
from orchestrator.tracking.live import live_summaries
from orchestrator.tracking.live_sessions import bound_sessions
from orchestrator.tracking.locks import registry_lock
from orchestrator.tracking.protected import Scorer, protected_set, set_answers
from orchestrator.tracking.registry import chain, checkpoint_of, ledger_of, resolve
from orchestrator.tracking.slice_figures import SLICED, pair_slice_rows
from orchestrator.tracking.version_record import SHOWN_CONFIDENCE
from orchestrator.tracking.version_refs import RegistryError, VersionRef
from pipelines.operations import PromoteSpec

ATTEMPTS = 3  # gates against a champion that moved meanwhile, before refusing
REGISTRY_ERRORS = (RegistryError, MlflowException)  # what a read or a move of an alias raises when it fails


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


def gate(name: str, candidate: str, limits: PromoteSpec, live: bool = False, *, score: Scorer) -> Verdict:
    """Whether `candidate` may replace the current champion (the policy's decision on what the
    registry holds: orchestrator/policy/promotion.py); without a champion it passes. `live`: also
    the model's serving sessions (`promote --live`, a canary's promotion); `score`: how both
    versions answer the protected set (the caller's model runner: the store runs none)."""
    champion = champion_of(name)
    if champion is None:
        return first_champion(name)
    return decide(candidate, evidence(name, candidate, champion, limits, live, score), limits, SHOWN_CONFIDENCE)


def evidence(name: str, candidate: str, champion: str, limits: PromoteSpec, live: bool, score: Scorer) -> Evidence:
    """What the gate weighs, read from the registry: both ledgers on the eval samples they share
    (matched by id: ledger.py), the candidate's slices, the protected set, the serving sessions."""
    sliced = limits.max_slice_nfr is not None
    new = ledger_of(VersionRef(name, candidate), SLICED if sliced else COMPARED)
    old = ledger_of(VersionRef(name, champion), COMPARED)
    try:
        in_old, in_new = shared_samples(old, new, (f"champion v{champion}", f"v{candidate}"))
    except LedgerMismatch as e:
        raise RegistryError(f"{name}: {e}") from None
    if len(in_new) == 0:
        raise RegistryError(f"{name} v{candidate} and champion v{champion} share no eval sample: no flips to gate on")
    labels = new["labels"][in_new]
    counts = EvalCounts.of(old["class_ids"][in_old], new["class_ids"][in_new], labels, known_mask(old, labels))
    level = limits.confidence or SHOWN_CONFIDENCE
    if sliced and not new.get("slices"):
        raise RegistryError(
            f"{name} v{candidate}'s ledger holds no slices (its spec named no data.slice_columns nor data.slices): "
            "no slice to gate"
        )
    return Evidence(
        champion,
        counts,
        slices=pair_slice_rows(old, new, level, limits.min_slice_n) if sliced else None,
        protected=protected_evidence(name, candidate, champion, score),
        live=bound_summaries(name, candidate, champion, level) if live else None,
    )


def bound_summaries(name: str, candidate: str, champion: str, level: float) -> list[dict]:
    """The model's serving sessions that `candidate`'s registered version records beside `champion`
    (live_sessions.py): a run that only carries a session's tags is not evidence."""
    return live_summaries(name, level, only=bound_sessions(name, candidate, champion) or set())


def protected_evidence(name: str, candidate: str, champion: str, score: Scorer) -> ProtectedEvidence | None:
    """The candidate on the model's protected set against the champion, both scored by `score` from
    their registered checkpoints (protected.py); None without a set."""
    suite = protected_set(name)
    if suite is None or not len(suite):
        return None
    new = set_answers(checkpoint_of(VersionRef(name, candidate)), suite, score)
    old = set_answers(checkpoint_of(VersionRef(name, champion)), suite, score)
    return ProtectedEvidence(suite.version, protected_counts(suite.labels, new, old))


def set_champion(name: str, version: str) -> None:
    """Move alias `champion` to an existing version, unconditionally (`promote` is the gated,
    race-safe way); RegistryError if there is no such version."""
    resolve(f"{name}/{version}")
    MlflowClient().set_registered_model_alias(name, "champion", version)
    descriptions.describe(name, chain(name))  # the champion marked in the model's description


def promote(name: str, candidate: str, limits: PromoteSpec, live: bool = False, *, score: Scorer) -> Verdict:
    """Move `champion` to `candidate` if it passes the gate against the champion it replaces, as
    a compare-and-set (module docstring); the verdict says why, and against which version. `score`:
    the protected set's model runner (`gate`)."""
    resolve(f"{name}/{candidate}")
    for _ in range(ATTEMPTS):
        verdict = gate(name, candidate, limits, live, score=score)
        if not verdict.passed:
            return verdict
        with registry_lock(name, "promotion") as lease:
            if champion_of(name) == verdict.champion:
                lease.check()  # fencing: this promotion still holds the lock (locks.py)
                set_champion(name, candidate)
                return verdict
    raise RegistryError(f"{name}: champion moved {ATTEMPTS} times while v{candidate} was gated; not promoted")
