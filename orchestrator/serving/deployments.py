"""The Ray Serve application of `congruent serve`: one HTTP endpoint in front of a model's champion
and, with a shadow, its candidate.

- `Gateway` (the ingress): `POST /predict` answers with the champion's classes; the samples the
  shadow fraction picks go to the candidate as well, in a task of their own (shadow.py: the client
  never waits for the shadow; a slow or failed shadow is counted, never fails a request).
  `POST /feedback` takes labels; `GET /live` the live figures; `GET /healthz`.
- `VersionModel`: one registered version, loaded from the registry with its own tokenizer / input
  description; requests are batched across clients (`@serve.batch`).
- `LiveLedger` (one replica): the pairs and labels, appended to the serving session's run in parquet
  chunks (orchestrator/tracking/live.py) every `chunk_rows` rows or `flush_s` seconds, whichever
  comes first, and on a graceful shutdown; on a restart it reads the chunks back, so a crash loses
  at most what it had not yet written (< chunk_rows rows, ≤ flush_s seconds of them). Each flush
  logs the live figures to the candidate's version run, as metrics over time (step: pairs seen).

FastAPI reads the route handlers' annotations at run time (a `Request` parameter), so this module
does not postpone them (no `from __future__ import annotations`).
"""

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from ray import serve
from ray.serve.handle import DeploymentHandle

from orchestrator.serving.requests import RequestError, parse_feedback, parse_predict
from orchestrator.serving.shadow import Shadow
from orchestrator.tracking.version_record import SHOWN_CONFIDENCE  # the live figures' bounds, as `versions`'

logger = logging.getLogger("ray.serve")


@dataclass(frozen=True)
class ServeSettings:
    """How the application serves: batching, the shadow's share, the ledger's chunks."""

    max_batch_size: int = 32
    batch_wait_s: float = 0.005
    shadow_fraction: float = 1.0
    max_samples: int = 256  # per request
    chunk_rows: int = 512
    flush_s: float = 5.0
    threads: int = 1  # torch threads of a version replica


@serve.deployment(max_ongoing_requests=64)
class VersionModel:
    """One registered version (`name`/`version`) answering batches of raw samples."""

    def __init__(self, name: str, version: str, settings: ServeSettings, device: str = "cpu") -> None:
        import torch

        from orchestrator.serving.predictor import Predictor
        from orchestrator.tracking import registry, store
        from orchestrator.tracking.version_refs import VersionRef

        torch.set_num_threads(settings.threads)
        store.configure()
        self.version = version
        self.predictor = Predictor(registry.checkpoint_of(VersionRef(name, version)), device)
        self.answer.set_max_batch_size(settings.max_batch_size)  # type: ignore[attr-defined]  # serve.batch's wrapper
        self.answer.set_batch_wait_timeout_s(settings.batch_wait_s)  # type: ignore[attr-defined]

    def describe(self) -> dict[str, Any]:
        """What the gateway checks requests against."""
        return {
            "version": self.version,
            "modality": self.predictor.modality,
            "num_classes": self.predictor.settings.num_classes,
            "class_names": self.predictor.class_names,
        }

    @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.005)
    async def answer(self, requests: list[list[str | bytes]]) -> list[Any]:
        """Each request's answers as (class id, probability) pairs, all requests in one forward; a
        request whose input cannot be read gets its RequestError (the others are answered)."""
        flat = [payload for request in requests for payload in request]
        try:
            answers = await asyncio.to_thread(self.predictor.answer, flat)
        except RequestError:
            return [await asyncio.to_thread(self._alone, request) for request in requests]
        out, start = [], 0
        for request in requests:
            out.append([(a.class_id, a.probability) for a in answers[start : start + len(request)]])
            start += len(request)
        return out

    def _alone(self, request: list[str | bytes]) -> Any:
        try:
            return [(a.class_id, a.probability) for a in self.predictor.answer(request)]
        except RequestError as e:
            return e


@serve.deployment(num_replicas=1, max_ongoing_requests=256, ray_actor_options={"num_cpus": 0})
class LiveLedger:
    """The serving session's pairs and labels (module docstring), held until written."""

    def __init__(self, run_id: str, candidate_run: str, settings: ServeSettings) -> None:
        from orchestrator.tracking import live, store

        store.configure()
        self.run_id, self.candidate_run, self.settings = run_id, candidate_run, settings
        pairs, labels = live.read_chunks(run_id, "pairs"), live.read_chunks(run_id, "labels")
        self.classes = {
            str(i): (int(a), int(b)) for i, a, b in zip(pairs["id"], pairs["champion_class"], pairs["candidate_class"])
        }
        joined = live.latest_labels(labels["id"], labels["id"], labels["label"], labels["time"])
        self.labels = {str(i): int(k) for i, k in zip(labels["id"], joined)}
        self.pending: dict[str, list[dict[str, Any]]] = {"pairs": [], "labels": []}
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
        for row in rows:
            self.classes[row["id"]] = (row["champion_class"], row["candidate_class"])
        self.pending["pairs"] += rows
        if len(self.pending["pairs"]) >= self.settings.chunk_rows:
            await self._flush_kept()

    async def add_labels(self, pairs: list[tuple[str, int]]) -> int:
        """Labels by request id; how many of them name a pair seen so far."""
        self._start_flusher()
        now = time.time()
        for sample_id, label in pairs:
            self.labels[sample_id] = label
        self.pending["labels"] += [{"id": i, "label": k, "time": now} for i, k in pairs]
        if len(self.pending["labels"]) >= self.settings.chunk_rows:
            await self._flush_kept()
        return sum(i in self.classes for i, _ in pairs)

    def counts(self) -> Any:
        import numpy as np

        from orchestrator.tracking.live import live_counts

        ids = list(self.classes)
        champion = np.array([self.classes[i][0] for i in ids], dtype=np.int64)
        candidate = np.array([self.classes[i][1] for i in ids], dtype=np.int64)
        labels = np.array([self.labels.get(i, -1) for i in ids], dtype=np.int64)
        return live_counts(champion, candidate, labels)

    def figures(self) -> dict[str, Any]:
        return {**self.counts().figures(SHOWN_CONFIDENCE), "pending_rows": sum(map(len, self.pending.values()))}

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
        from mlflow import MlflowClient

        figures = self.figures()
        step = int(figures["pairs"])
        client = MlflowClient()
        for key in ("disagreement", "disagreement_upper", "nfr", "nfr_upper", "pfr", "labelled", "pairs"):
            value = figures[key]
            if value is not None:
                for run in (self.candidate_run, self.run_id):
                    client.log_metric(run, f"live.{key}", float(value), step=step)

    def __del__(self) -> None:
        """Serve's graceful shutdown (after the requests in flight): write what is still pending."""
        pending = getattr(self, "pending", {})  # none when __init__ failed
        for kind in ("pairs", "labels"):
            rows, pending[kind] = pending.get(kind, []), []
            if rows:
                from orchestrator.tracking.live import write_chunk

                write_chunk(self.run_id, kind, rows)


async def _json(request: Request) -> Any:
    """The body as JSON; RequestError when it is not. (Defined before the gateway: `serve.ingress`
    captures the class with the module's names as they are when it is decorated.)"""
    try:
        return await request.json()
    except ValueError:
        raise RequestError("the body is not JSON") from None


app = FastAPI(title="congruent serve")


@serve.deployment(max_ongoing_requests=256, ray_actor_options={"num_cpus": 0})
@serve.ingress(app)
class Gateway:
    """The endpoint (module docstring)."""

    def __init__(
        self,
        model: str,
        champion: DeploymentHandle,
        candidate: DeploymentHandle | None,
        ledger: DeploymentHandle | None,
        settings: ServeSettings,
    ) -> None:
        self.model, self.settings = model, settings
        self.champion, self.candidate, self.ledger = champion, candidate, ledger
        self.shadow: Shadow | None = None
        if candidate is not None and ledger is not None:
            self.shadow = Shadow(
                lambda payloads: candidate.answer.remote(payloads),
                lambda rows: ledger.add_pairs.remote(rows),
                settings.shadow_fraction,
            )
        self.described: dict[str, Any] | None = None
        self.candidate_version: str | None = None

    async def _described(self) -> dict[str, Any]:
        if self.described is None:
            self.described = await self.champion.describe.remote()
            if self.candidate is not None:
                self.candidate_version = (await self.candidate.describe.remote())["version"]
        return self.described

    @app.get("/healthz")
    async def healthz(self) -> dict[str, Any]:
        described = await self._described()
        return {
            "status": "ok",
            "model": self.model,
            "version": described["version"],
            "shadow": self.candidate_version,
            "shadow_fraction": self.settings.shadow_fraction if self.candidate is not None else None,
            "shadow_failures": self.shadow.failures if self.shadow else 0,
            "shadows_in_flight": len(self.shadow.tasks) if self.shadow else 0,
        }

    @app.post("/predict")
    async def predict(self, request: Request) -> JSONResponse:
        described = await self._described()
        try:
            samples = parse_predict(await _json(request), described["modality"], self.settings.max_samples)
            answers = await self.champion.answer.remote([s.payload for s in samples])
            if isinstance(answers, RequestError):
                raise answers
        except RequestError as e:
            return JSONResponse({"error": str(e), "model": self.model, "version": described["version"]}, 400)
        names = described["class_names"]
        predictions = [
            {
                "id": s.id,
                "class": k,
                **({"name": names[k]} if names and k < len(names) else {}),
                "probability": p,
            }
            for s, (k, p) in zip(samples, answers)
        ]
        if self.shadow is not None:
            self.shadow.send(samples, answers, time.time())
        return JSONResponse({"model": self.model, "version": described["version"], "predictions": predictions})

    @app.post("/feedback")
    async def feedback(self, request: Request) -> JSONResponse:
        described = await self._described()
        if self.ledger is None:
            return JSONResponse({"error": "no shadow is served: labels are kept for a shadowed candidate"}, 409)
        try:
            pairs = parse_feedback(await _json(request), described["num_classes"])
        except RequestError as e:
            return JSONResponse({"error": str(e)}, 400)
        matched = await self.ledger.add_labels.remote(pairs)
        return JSONResponse({"accepted": len(pairs), "matched": matched})

    @app.get("/live")
    async def live(self) -> JSONResponse:
        if self.ledger is None:
            return JSONResponse({"error": "no shadow is served"}, 409)
        figures = await self.ledger.figures.remote()
        described = await self._described()
        return JSONResponse(
            {"model": self.model, "champion": described["version"], "candidate": self.candidate_version, **figures}
        )

    @app.post("/flush")
    async def flush(self) -> dict[str, Any]:
        """Wait for the shadows in flight, then have the ledger write what it holds."""
        if self.shadow is not None:
            await self.shadow.drain(timeout=60)
        if self.ledger is not None:
            await self.ledger.flush.remote()
        return {"flushed": True}


def application(
    model: str,
    champion: str,
    candidate: str | None,
    run_id: str | None,
    candidate_run: str | None,
    settings: ServeSettings,
    replicas: int = 1,
    cpus: float = 1.0,
    gpus: float = 0.0,
) -> Any:
    """The bound application: the gateway, the champion and, with a candidate, its shadow and ledger."""
    options = {"num_replicas": replicas, "ray_actor_options": {"num_cpus": cpus, "num_gpus": gpus}}
    device = "cuda" if gpus > 0 else "cpu"
    served = VersionModel.options(name="champion", **options).bind(model, champion, settings, device)  # type: ignore[attr-defined]  # @serve.deployment's
    shadow = ledger = None
    if candidate is not None:
        assert run_id is not None and candidate_run is not None
        shadow = VersionModel.options(name="candidate", **options).bind(model, candidate, settings, device)  # type: ignore[attr-defined]
        ledger = LiveLedger.bind(run_id, candidate_run, settings)  # type: ignore[attr-defined]
    return Gateway.bind(model, served, shadow, ledger, settings)  # type: ignore[attr-defined]
