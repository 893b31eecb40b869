"""What the spec asks of its data's reading that a streamed source does not do yet."""

from __future__ import annotations

from orchestrator.planning.facts.kinds import Found, Problems, Source, StreamSupport
from orchestrator.planning.streaming import stream_problems


def check(found: Found) -> StreamSupport | Problems | None:
    source = found.get(Source)
    if source is None:
        return None
    problems = stream_problems(source.request)
    return Problems(tuple(problems)) if problems else StreamSupport()
