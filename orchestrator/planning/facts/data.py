"""The splits: train, val and regression-eval, read here once (held data) or taken from the opened
stream — the class list, sizes and sample ids every later check and the Plan read."""

from __future__ import annotations

from orchestrator.planning.facts.kinds import Data, Found, Problems, Source
from workers.errors import DataError, problems_of


def check(found: Found) -> Data | Problems | None:
    from workers.tasks.resolve import cached_splits

    source = found.get(Source)
    if source is None:
        return None
    try:
        return Data(cached_splits(source.request))
    except DataError as e:
        return Problems.of("data", problems_of(e))
