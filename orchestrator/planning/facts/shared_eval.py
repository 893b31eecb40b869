"""The old registry version's ledger holds enough of this spec's eval samples: flips against a
version measured on other samples mean nothing."""

from __future__ import annotations

from orchestrator.planning.facts.kinds import Data, Found, OldVersion, Problems, SharedEval
from orchestrator.tracking.version_refs import RegistryError
from workers.errors import problems_of


def check(found: Found) -> SharedEval | Problems | None:
    old, data = found.get(OldVersion), found.get(Data)
    if old is None or old.parent is None or data is None:
        return None
    from orchestrator.tracking.registry import check_shared_eval

    splits = data.splits
    try:
        return SharedEval(check_shared_eval(old.parent, splits.eval.ids.numpy(), splits.fingerprint))
    except RegistryError as e:
        return Problems.of("", problems_of(e))
