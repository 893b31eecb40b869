"""`LiveLedger`, the serving session's pairs and labels in one Ray Serve replica (deployments.py
says how the application uses it): appended to the session's run in parquet chunks
(orchestrator/tracking/live.py) every `chunk_rows` rows or `flush_s` seconds, whichever comes first,
and on a graceful shutdown; on a restart it replays the chunks (one at a time), so a crash loses at
most what it had not yet written (< chunk_rows rows, ≤ flush_s seconds of them). Its memory is
bounded: the last `max_live_ids` ids' pairs and labels and running totals over every id
(tracking/live_window.py). Each write logs the live figures to the candidate's version run, as
metrics over time (step: pairs seen)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from ray import serve

from orchestrator.serving import credentials
from orchestrator.serving.settings import ServeSettings
from orchestrator.tracking.live_window import LiveWindow, replay
from orchestrator.tracking.version_record import SHOWN_CONFIDENCE  # the live figures' bounds, as `versions`'

logger = logging.getLogger("ray.serve")


@serve.deployment(num_replicas=1, max_ongoing_requests=256, ray_actor_options={"num_cpus": 0})
class LiveLedger:
    """The serving session's pairs and labels (module docstring), held until written."""

    def __init__(
        self, run_id: str, candidate_run: str, settings: ServeSettings, sealed: credentials.Sealed | None = None
    ) -> None:
        from orchestrator.tracking import live, store

        credentials.load_into_replica(sealed)  # the storage credentials its chunks are written with
        store.configure()
        self.run_id, self.candidate_run, self.settings = run_id, candidate_run, settings
        window = LiveWindow(settings.max_live_ids, settings.max_live_ids_per_client)
        self.window = replay(window, live.chunks(run_id, adopt_last=True))
        self.pending: dict[str, list[dict[str, Any]]] = {"pairs": [], "labels": []}
        self.relabelled = 0  # labels replaced on request in this replica's life (logged as live.relabelled)
        self.flusher: asyncio.Task | None = None
        self.lock = asyncio.Lock()

    def _start_flusher(self) -> None:
        if self.flusher is None:
            self.flusher = asyncio.get_running_loop().create_task(self._flush_every())

    async def _flush_every(self) -> None:
        while True:
            await asyncio.sleep(self.settings.flush_s)
            await self._flush_kept()

    async def _flush_kept(self) -> None:
        """`flush`, its failure logged: the store is down, the rows stay pending for the next write."""
        try:
            await self.flush()
        except Exception:
            logger.exception("live ledger: writing a chunk failed; kept, retried in %s s", self.settings.flush_s)

    async def add_pairs(self, rows: list[dict[str, Any]]) -> None:
        self._start_flusher()
        forgotten, refused, crowded = self.window.forgotten, self.window.resent_after_label, self.window.crowded_out
        kept = [  # a row resent after a newer one of its id (a lost reply) does not replace it
            row
            for row in rows
            if self.window.add_pair(
                row["id"],
                row["time"],
                row["champion_class"],
                row["candidate_class"],
                row.get("digest"),
                client=row.get("client"),
            )
        ]
        if crowded == 0 < self.window.crowded_out:
            logger.warning(
                "live ledger: a client sent more than %d ids (--max-live-ids-per-client): its oldest leave first, "
                "labels for them are counted as unmatched",
                self.settings.max_live_ids_per_client,
            )
        if self.window.resent_after_label > refused:
            logger.warning(
                "live ledger: %d pairs refused: their ids hold a label and came again with another input",
                self.window.resent_after_label - refused,
            )
        if forgotten == 0 < self.window.forgotten:
            logger.warning(
                "live ledger: it holds the last %d ids (--max-live-ids); labels for older ids are counted as "
                "unmatched, their pairs stay in the figures",
                self.settings.max_live_ids,
            )
        self.pending["pairs"] += kept
        if len(self.pending["pairs"]) >= self.settings.chunk_rows:
            await self._flush_kept()

    async def add_labels(self, pairs: list[tuple[str, int]], relabel: bool = False) -> dict[str, int]:
        """Labels by request id, kept only for ids this session shadowed (a pair is held in the window):
        a label of another id (or of one that left the window) is counted as unmatched and dropped,
        so nobody can add labelled pairs the gateway never served. An id's first label stands: a
        later one is counted as unchanged, unless `relabel` is asked (then it replaces it, is
        written, counted and logged)."""
        self._start_flusher()
        now, kept = time.time(), []
        counts = {"accepted": 0, "unmatched": 0, "unchanged": 0, "relabelled": 0}
        for sample_id, label in pairs:
            outcome = self.window.add_label(sample_id, label, relabel)
            counts[outcome] += 1
            if outcome in ("accepted", "relabelled"):
                kept.append({"id": sample_id, "label": label, "time": now})
        if counts["relabelled"]:
            self.relabelled += counts["relabelled"]
            logger.warning("live ledger: %d labels replaced on request (relabel)", counts["relabelled"])
        self.pending["labels"] += kept
        if len(self.pending["labels"]) >= self.settings.chunk_rows:
            await self._flush_kept()
        return counts

    def counts(self) -> Any:
        return self.window.counts()

    def figures(self) -> dict[str, Any]:
        pending = sum(map(len, self.pending.values()))
        return {
            **self.counts().figures(SHOWN_CONFIDENCE),
            "pending_rows": pending,
            "ids_forgotten": self.window.forgotten,
            "resent_after_label": self.window.resent_after_label,
        }

    async def flush(self) -> None:
        """Write what is pending as one chunk of each kind, then log the figures to the candidate's run."""
        from orchestrator.tracking.live import write_chunk

        async with self.lock:
            wrote = False
            for kind in ("pairs", "labels"):
                # the rows taken before the write: those that come while it runs wait for the next one
                rows, self.pending[kind] = self.pending[kind], []
                if not rows:
                    continue
                try:
                    await asyncio.to_thread(write_chunk, self.run_id, kind, rows)
                except BaseException:
                    self.pending[kind] = rows + self.pending[kind]
                    raise
                wrote = True
            if wrote:
                await asyncio.to_thread(self._log_figures)

    def _log_figures(self) -> None:
        from orchestrator.tracking.live import log_live_figures

        figures = self.figures()
        step = int(figures["pairs"])
        shown = ("disagreement", "disagreement_upper", "nfr", "nfr_upper", "pfr", "labelled", "pairs")
        logged = {key: figures[key] for key in shown if figures[key] is not None}
        log_live_figures((self.candidate_run, self.run_id), logged, step)
        kept = {"relabelled": self.relabelled, "resent_after_label": self.window.resent_after_label}
        if any(kept.values()):
            log_live_figures((self.run_id,), kept, step)

    def __del__(self) -> None:
        """Serve's graceful shutdown (after the requests in flight): write what is still pending."""
        pending = getattr(self, "pending", {})  # none when __init__ failed
        for kind in ("pairs", "labels"):
            rows, pending[kind] = pending.get(kind, []), []
            if rows:
                from orchestrator.tracking.live import write_chunk

                write_chunk(self.run_id, kind, rows)
