"""Shadowing off the response path: the samples a fraction picks are queued after the champion
answered, and a task of their own sends them to the candidate and their pairs to the live ledger.
The caller (the gateway) returns its response at once; a slow candidate delays only that task, a
failing one is counted and logged, never raised. The samples of many requests are coalesced: one
candidate call and one ledger append carry all that queued meanwhile (at least `coalesce_s`, at most
`max_coalesced` samples), so a shadow adds two calls per few milliseconds, not two per request. Plain
asyncio: the candidate and the ledger are any awaitables (Ray Serve handles in the gateway,
coroutines in tests). In a canary (canary.py) the roles turn round: the candidate answered the
canary's samples and the champion is asked in the shadow; the rows name each version's class all
the same."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from orchestrator.serving.requests import RequestError, Sample, shadowed

logger = logging.getLogger("ray.serve")
Answers = list[tuple[int, float]]


def pair_rows(
    samples: Sequence[Sample], champion: Answers, candidate: Answers, answered: Sequence[float]
) -> list[dict[str, Any]]:
    """The live ledger's rows (tracking/live.py PAIR_SCHEMA) of samples both versions answered, each
    with the time the champion answered it."""
    return [
        {
            "id": s.id,
            "digest": s.digest,
            "time": t,
            "champion_class": k,
            "champion_probability": p,
            "candidate_class": k2,
            "candidate_probability": p2,
            "client": s.client or None,
        }
        for s, (k, p), (k2, p2), t in zip(samples, champion, candidate, answered, strict=True)
    ]


MAX_UNSENT_ROWS = 100_000  # pairs kept for the ledger while it is unreachable (~20 MB); beyond, the oldest go
MAX_QUEUED_BYTES = 64 * 2**20  # inputs waiting for the candidate; beyond, the oldest go (counted)
CALL_TIMEOUT_S = 60.0  # a candidate call that takes longer is a failed shadow (counted)


class Shadow:
    """The candidate beside the champion (module docstring); `failures` counts the candidate calls
    that failed or took more than `timeout_s`, `unreadable` the samples it could not read (the others
    of their call are paired all the same). Pairs the ledger does not take (its replica restarting)
    are kept here and sent again with the next ones (`unsent`), so a ledger restart loses only what
    the ledger itself held unwritten. `queued` holds at most `max_queued_bytes` of inputs (a hung
    candidate holds no more than that), `unsent` at most `max_unsent` rows; `dropped` counts the
    oldest that went beyond either."""

    def __init__(
        self,
        candidate: Callable[[list[str | bytes]], Awaitable[Any]],
        ledger: Callable[[list[dict[str, Any]]], Awaitable[Any]],
        fraction: float,
        max_unsent: int = MAX_UNSENT_ROWS,
        coalesce_s: float = 0.005,
        max_coalesced: int = 256,
        max_queued_bytes: int = MAX_QUEUED_BYTES,
        timeout_s: float = CALL_TIMEOUT_S,
        answered_by_candidate: bool = False,
    ) -> None:
        self.answered_by_candidate = answered_by_candidate  # a canary: `candidate` calls the champion
        self.candidate, self.ledger, self.fraction, self.max_unsent = candidate, ledger, fraction, max_unsent
        self.coalesce_s, self.max_coalesced = coalesce_s, max_coalesced
        self.max_queued_bytes, self.timeout_s = max_queued_bytes, timeout_s
        self.queued: list[tuple[Sample, tuple[int, float], float]] = []
        self.queued_bytes = 0
        self.unreadable = 0
        self.sender: asyncio.Task | None = None
        self.tasks: set[asyncio.Task] = set()
        self.failures = 0
        self.unsent: list[dict[str, Any]] = []
        self.dropped = 0

    def send(self, samples: Sequence[Sample], served: Answers, answered: float) -> None:
        """Queue the picked samples (`served`: what the request was answered with) for the shadow;
        returns at once (in the running event loop)."""
        picked = [(s, a, answered) for s, a in zip(samples, served) if shadowed(s.id, self.fraction)]
        if not picked:
            return
        self.queued += picked
        self.queued_bytes += sum(len(s.payload) for s, _, _ in picked)
        gone = 0
        while self.queued_bytes > self.max_queued_bytes:  # the candidate does not keep up: the oldest go
            self.queued_bytes -= len(self.queued[gone][0].payload)
            gone += 1
        if gone:
            self.dropped += gone
            self.queued = self.queued[gone:]
        if self.sender is None or self.sender.done():
            self.sender = asyncio.get_running_loop().create_task(self._send_queued())
            self.tasks.add(self.sender)
            self.sender.add_done_callback(self.tasks.discard)

    async def _send_queued(self) -> None:
        """Until the queue is empty: wait `coalesce_s` for more, then pair what queued (one call each)."""
        while self.queued:
            await asyncio.sleep(self.coalesce_s)
            batch, self.queued = self.queued[: self.max_coalesced], self.queued[self.max_coalesced :]
            self.queued_bytes -= sum(len(s.payload) for s, _, _ in batch)
            await self._pair([s for s, _, _ in batch], [a for _, a, _ in batch], [t for _, _, t in batch])

    async def _pair(self, samples: list[Sample], served: Answers, answered: list[float]) -> None:
        try:
            answer = await asyncio.wait_for(self.candidate([s.payload for s in samples]), self.timeout_s)
        except Exception:  # a failed or hung shadow never fails a request; it is counted
            self.failures += 1
            logger.exception("shadow of %d samples failed", len(samples))
            return
        if isinstance(answer, RequestError):  # a sample it cannot read: each is asked alone
            await self.deliver(await self._alone(samples, served, answered))
            return
        _, other = answer  # (version, answers), as VersionModel.answer gives them
        await self.deliver(self._rows(samples, served, other, answered))

    def _rows(self, samples: Sequence[Sample], served: Answers, other: Answers, answered: Sequence[float]) -> list:
        """`pair_rows` of what the request was answered with and what the shadow answered."""
        if self.answered_by_candidate:
            return pair_rows(samples, other, served, answered)
        return pair_rows(samples, served, other, answered)

    async def _alone(self, samples: list[Sample], served: Answers, answered: list[float]) -> list[dict[str, Any]]:
        """The pairs of a call the candidate refused, each sample asked alone: those it reads; the
        others counted in `unreadable`."""
        rows = []
        for sample, ours, at in zip(samples, served, answered, strict=True):
            try:
                answer = await asyncio.wait_for(self.candidate([sample.payload]), self.timeout_s)
            except Exception:
                self.failures += 1
                logger.exception("shadow of sample %s failed", sample.id)
                continue
            if isinstance(answer, RequestError):
                self.unreadable += 1
            else:
                rows += self._rows([sample], [ours], answer[1], [at])
        return rows

    async def deliver(self, rows: list[dict[str, Any]]) -> None:
        """Send `rows` and whatever waits from earlier to the ledger; kept for the next send if it fails."""
        batch, self.unsent = self.unsent + rows, []
        if not batch:
            return
        try:
            await self.ledger(batch)
        except Exception:
            self.unsent = batch + self.unsent
            if len(self.unsent) > self.max_unsent:
                self.dropped += len(self.unsent) - self.max_unsent
                self.unsent = self.unsent[-self.max_unsent :]
            logger.exception("the live ledger did not take %d pairs: kept, sent again with the next", len(batch))

    async def drain(self, timeout: float) -> None:
        """Wait (at most `timeout` s) for the shadows in flight, then send what waits for the ledger."""
        if self.tasks:
            await asyncio.wait(set(self.tasks), timeout=timeout)
        await self.deliver([])
