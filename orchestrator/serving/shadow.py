"""Shadowing off the response path: the samples a fraction picks go to the candidate in a task of
their own, started after the champion answered; their pairs go to the live ledger. The caller (the
gateway) returns its response at once; a slow candidate delays only its task, a failing one is
counted and logged, never raised. Plain asyncio: the candidate and the ledger are any awaitables
(Ray Serve handles in the gateway, coroutines in tests)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from orchestrator.serving.requests import RequestError, Sample, shadowed

logger = logging.getLogger("ray.serve")
Answers = list[tuple[int, float]]


def pair_rows(
    samples: Sequence[Sample], champion: Answers, candidate: Answers, answered: float
) -> list[dict[str, Any]]:
    """The live ledger's rows (tracking/live.py PAIR_SCHEMA) of samples both versions answered."""
    return [
        {
            "id": s.id,
            "digest": s.digest,
            "time": answered,
            "champion_class": k,
            "champion_probability": p,
            "candidate_class": k2,
            "candidate_probability": p2,
        }
        for s, (k, p), (k2, p2) in zip(samples, champion, candidate, strict=True)
    ]


class Shadow:
    """The candidate beside the champion (module docstring); `failures` counts the failed sends."""

    def __init__(
        self,
        candidate: Callable[[list[str | bytes]], Awaitable[Any]],
        ledger: Callable[[list[dict[str, Any]]], Awaitable[Any]],
        fraction: float,
    ) -> None:
        self.candidate, self.ledger, self.fraction = candidate, ledger, fraction
        self.tasks: set[asyncio.Task] = set()
        self.failures = 0

    def send(self, samples: Sequence[Sample], champion: Answers, answered: float) -> None:
        """Start shadowing the picked samples; returns at once (in the running event loop)."""
        picked = [(s, a) for s, a in zip(samples, champion) if shadowed(s.id, self.fraction)]
        if not picked:
            return
        task = asyncio.get_running_loop().create_task(
            self._pair([s for s, _ in picked], [a for _, a in picked], answered)
        )
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _pair(self, samples: list[Sample], champion: Answers, answered: float) -> None:
        try:
            candidate = await self.candidate([s.payload for s in samples])
            if isinstance(candidate, RequestError):
                raise candidate
            await self.ledger(pair_rows(samples, champion, candidate, answered))
        except Exception:  # a failed shadow never fails a request; it is counted
            self.failures += 1
            logger.exception("shadow of %d samples failed", len(samples))

    async def drain(self, timeout: float) -> None:
        """Wait (at most `timeout` s) for the shadows in flight."""
        if self.tasks:
            await asyncio.wait(set(self.tasks), timeout=timeout)
