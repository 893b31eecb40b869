"""The splits: train, val and regression-eval, read here once (held data) or taken from the opened
stream — the class list, sizes and sample ids every later check and the Plan read."""

from __future__ import annotations

from orchestrator.planning.facts.kinds import Data, Found, Problems
from workers.errors import DataError, problems_of


def check(found: Found) -> Data | Problems | None:
    from workers.tasks.resolve import cached_splits

    request = found.request  # with the protected rows that join train
    if request is None:
        return None
    try:
        return Data(cached_splits(request))
    except DataError as e:
        return Problems.of("data", problems_of(e))
