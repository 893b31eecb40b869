"""The data source: whether it streams (`data.streaming`, settled here: orchestrator/planning/streaming.py),
and a streamed source opened — its files listed, a sample decoded, a text table's labels scanned."""

from __future__ import annotations

from orchestrator.planning.facts.kinds import Found, Problems, Source
from orchestrator.planning.plan import data_request
from orchestrator.planning.streaming import in_memory_holders, settle_streaming
from pipelines.spec import SpecError
from workers.errors import DataError, problems_of


def check(found: Found) -> Source | Problems:
    spec = found.settled
    try:
        return Source(settle_streaming(data_request(spec), in_memory_holders(spec)))
    except DataError as e:
        return Problems.of("data", problems_of(e))
    except SpecError as e:  # its lines name their field
        return Problems.of("", problems_of(e))
