"""`congruent promote`'s flow: the store, then the gated compare-and-set of alias `champion`
(tracking/promotion.py), its failures in one RegistryError."""

from __future__ import annotations

from orchestrator.policy.promotion import Verdict
from orchestrator.tracking import promotion, store
from orchestrator.tracking.version_refs import RegistryError
from pipelines.operations import PromoteSpec
from workers.models.protected_scoring import protected_answers

__all__ = ["RegistryError", "promote_version"]


def promote_version(model: str, version: str, gate: PromoteSpec, live: bool = False) -> Verdict:
    """Move `model`'s champion to `version` if it passes `gate` (with `live`, on the serving session
    beside the champion too); the verdict says why. A registry that refuses or is out of reach:
    RegistryError, its first line the store's own."""
    store.configure()
    try:
        return promotion.promote(model, version, gate, live, score=protected_answers)
    except promotion.REGISTRY_ERRORS as e:
        raise RegistryError(str(e)) from None
