"""`congruent versions`: what the registry, the ledgers and the live windows say about a model's
version chain, gathered for the command to print (or to write as JSON)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.tracking.version_record import SHOWN_CONFIDENCE


@dataclass(frozen=True)
class Chain:
    """A model's versions (`records`, VersionRecords), those whose publication was interrupted, the
    confidence of the bounds shown, and `output`: everything asked for, as `--json` prints it
    (model, versions, incomplete; matrix, slices, protected when asked; live)."""

    records: list[Any]
    incomplete: list[str]
    output: dict[str, Any]
    confidence: float = SHOWN_CONFIDENCE


def gather_chain(model: str, matrix: bool, slices: bool, min_slice_n: int, protected: bool) -> Chain | None:
    """The chain of `model` with what was asked of it; None when no version of it is registered."""
    from orchestrator.tracking import registry, store
    from orchestrator.tracking.live import live_summaries

    store.configure()
    records = registry.chain(model)
    incomplete = [str(mv.version) for mv in registry.versions(model, incomplete=True)]
    if not records and not incomplete:
        return None
    output: dict[str, Any] = {"model": model, "versions": [r.row() for r in records], "incomplete": incomplete}
    if matrix:
        names, nfr, shared = registry.chain_matrix(model)
        output["matrix"] = {"versions": names, "nfr_matrix": nfr, "shared_samples": shared}
        output["matrix"]["without_ledger"] = [r.version for r in records if r.version not in names]
    if slices:
        output["slices"] = _slices(model, records, min_slice_n)
    if protected:
        output["protected"] = _protected(model, records)
    output["live"] = live_summaries(model, SHOWN_CONFIDENCE)
    return Chain(records, incomplete, output)


def _slices(model: str, records: list[Any], min_slice_n: int) -> dict[str, Any]:
    """Each version's slices against its parent and the champion."""
    from orchestrator.tracking.promotion import champion_of
    from orchestrator.tracking.slice_figures import chain_slices

    parents = {r.version: r.parent_version for r in records}
    return chain_slices(model, parents, champion_of(model), SHOWN_CONFIDENCE, min_slice_n)


def _protected(model: str, records: list[Any]) -> dict[str, Any] | None:
    """Each version on the protected set, or None without one."""
    from orchestrator.tracking.promotion import champion_of
    from orchestrator.tracking.protected import protected_table
    from workers.models.protected_scoring import protected_answers

    chain = [(r.version, r.parent_version) for r in records]
    return protected_table(model, chain, champion_of(model), protected_answers)
