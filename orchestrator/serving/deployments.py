"""The Ray Serve applications of `congruent serve`: one HTTP endpoint in front of a model's champion
and, with a shadow, its candidate.

- `Gateway` (the ingress of the application `congruent-MODEL`): `POST /predict` answers with the
  champion's classes; the samples the shadow fraction picks go to the candidate as well, in a task
  of their own (shadow.py: the client never waits for the shadow; a slow or failed shadow is
  counted, never fails a request). `POST /feedback` takes labels; `GET /live` the live figures;
  `GET /healthz`; `POST /champion` moves to the version the registry's alias names (a swap). A
  replica that starts after a swap serves the registry's champion too. With a token (access.py),
  every route but `/healthz` asks for it.
- `VersionModel`: one registered version, loaded from the registry with its own tokenizer / input
  description; requests are batched across clients (`@serve.batch`). Each served version, the
  champion and the shadowed candidate alike, runs in an application of its own (`version_app_name`):
  a swap to another version starts it beside the old champion and the gateway moves only once it
  answers (Ray Serve's own update of a deployment stops an old replica before its successor is up:
  with one replica, requests fail meanwhile); a swap to the shadowed candidate starts nothing, the
  gateway moves to the replicas that shadowed, so a cluster with no CPU to spare swaps too.
- `LiveLedger` (ledger.py, one replica): the pairs and labels, in the session's run.

FastAPI reads the route handlers' annotations at run time (a `Request` parameter), so this module
does not postpone them (no `from __future__ import annotations`).
"""

import asyncio
import json
import logging
import time
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from ray import serve
from ray.serve.handle import DeploymentHandle

from orchestrator.serving.access import SCOPE_ENV, authorised
from orchestrator.serving.ledger import LiveLedger
from orchestrator.serving.requests import BodyTooLarge, RequestError, parse_feedback, parse_predict, wants_relabel
from orchestrator.serving.settings import Resources, ServeSettings
from orchestrator.serving.shadow import Shadow

logger = logging.getLogger("ray.serve")


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
        """Each request's (version, answers), the answers as (class id, probability) pairs, all requests
        in one forward; a request whose input cannot be read gets its RequestError (the others are
        answered). The version travels with the answers: during a champion swap (driver/serve.py) a
        deployment's replicas serve two versions for a moment, and the gateway says which answered."""
        flat = [payload for request in requests for payload in request]
        try:
            answers = await asyncio.to_thread(self.predictor.answer, flat)
        except RequestError:
            return [await asyncio.to_thread(self._alone, request) for request in requests]
        out, start = [], 0
        for request in requests:
            out.append((self.version, [(a.class_id, a.probability) for a in answers[start : start + len(request)]]))
            start += len(request)
        return out

    def _alone(self, request: list[str | bytes]) -> Any:
        try:
            return (self.version, [(a.class_id, a.probability) for a in self.predictor.answer(request)])
        except RequestError as e:
            return e


def version_app_name(model: str, version: str) -> str:
    """The application that serves one version of a model as its champion (no HTTP route: the
    gateway calls it): a swap starts the new one beside the old before the gateway moves."""
    return f"congruent-{model}--v{version}"


def version_handle(model: str, version: str) -> DeploymentHandle:
    return serve.get_deployment_handle("version", app_name=version_app_name(model, version))


async def _awaited(response: Any) -> Any:
    return await response


def _refused(request: Request, digests: dict[str, str | None], scope: str) -> JSONResponse | None:
    """A 401 when the request does not carry the token of the route's `scope` (access.py); a 415 for
    a POST whose body is not declared JSON: a web page can send a cross-origin `text/plain` POST
    without asking first, never an `application/json` one."""
    if not authorised(request.headers.get("authorization"), digests.get(scope)):
        env = SCOPE_ENV[scope]
        problem = f"this route asks for `Authorization: Bearer TOKEN` (the {scope} token: {env} it was started with)"
        return JSONResponse({"error": problem}, 401, headers={"www-authenticate": "Bearer"})
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if request.method == "POST" and media_type != "application/json":
        problem = f"POST bodies are JSON: send `content-type: application/json`, not {media_type or 'none'!r}"
        return JSONResponse({"error": problem}, 415)
    return None


class ChampionUnavailable(Exception):
    """The registry or the application of the version it names did not answer (in one line)."""


async def registry_champion(
    model: str, served: str, timeout_s: float, handle_of: Any = None
) -> tuple[str, Any, dict[str, Any]] | None:
    """(version, handle, description) of the version `MODEL@champion` names, when it is not `served`
    and its application (`version_app_name`) answers within `timeout_s`; None when it is `served`.
    ChampionUnavailable when the registry or that application does not answer in time."""
    from orchestrator.tracking import registry

    try:
        resolved = asyncio.to_thread(registry.resolve, f"{model}@champion")
        version = (await asyncio.wait_for(resolved, timeout=timeout_s)).version
    except Exception as e:  # noqa: BLE001  # MLflow down or slow, the alias removed
        raise ChampionUnavailable(f"the registry did not answer: {type(e).__name__}: {e}") from None
    if version == served:
        return None
    try:  # Serve refuses a handle to an application it does not know; one that is not up waits: bounded
        handle = (handle_of or version_handle)(model, version)
        answer = await asyncio.wait_for(_awaited(handle.describe.remote()), timeout=timeout_s)
    except Exception as e:  # noqa: BLE001  # its application is not deployed (yet)
        raise ChampionUnavailable(f"v{version} is not deployed: {type(e).__name__}") from None
    return version, handle, answer


async def _json(request: Request, max_bytes: int) -> Any:
    """The body as JSON; BodyTooLarge as soon as it declares or has sent more than `max_bytes` (the
    rest is never read), RequestError when it is not JSON. (This and the functions above are defined
    before the gateway: `serve.ingress` captures the class with the module's names as they are when
    it is decorated.)"""
    too_large = BodyTooLarge(f"the body holds more than {max_bytes:,} bytes (--max-body-mb)")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise too_large
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise too_large
        chunks.append(chunk)
    try:
        return json.loads(b"".join(chunks))
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
        champion: str,
        candidate: str | None,
        ledger: DeploymentHandle | None,
        settings: ServeSettings,
        token_digests: dict[str, str | None] | None = None,
    ) -> None:
        self.model, self.settings, self.digests = model, settings, token_digests or {}
        self.bound_champion = champion  # the version this application was deployed with
        # its handle is taken at the first request (`_described`): after a swap that application is
        # gone, and asking Serve for a handle to it raises, which would fail the replica's start
        self.champion: DeploymentHandle | None = None
        self.candidate_version, self.ledger = candidate, ledger  # the shadowed version, in its own application
        self.shadow: Shadow | None = None  # started with the champion's handle (`_described`)
        self.described: dict[str, Any] | None = None  # the served champion's description
        self.swapped = 0  # answers from another champion version than the session's (during a swap)
        self.starting = asyncio.Lock()

    async def _described(self) -> dict[str, Any]:
        async with self.starting:
            if self.described is None:
                await self._catch_up()
            if self.described is None:
                self.champion = version_handle(self.model, self.bound_champion)
                self.described = await self.champion.describe.remote()
                self.shadow = self._shadow()
        return self.described

    def _shadow(self) -> Shadow | None:
        """The candidate's shadow, when one is served: its answers go with the champion's to the ledger."""
        if self.candidate_version is None or self.ledger is None:
            return None
        candidate, ledger = version_handle(self.model, self.candidate_version), self.ledger
        return Shadow(
            lambda payloads: candidate.answer.remote(payloads),
            lambda rows: ledger.add_pairs.remote(rows),
            self.settings.shadow_fraction,
        )

    async def _catch_up(self) -> None:
        """On a replica's start: a promotion may have been swapped in since the application was
        deployed (its champion's application deleted since), so the version the registry names is
        served when its application answers; its shadow's session had ended with the swap. With the
        registry out of reach, or the new version not deployed yet, the deployed champion is."""
        try:
            moved = await registry_champion(self.model, self.bound_champion, timeout_s=10)
        except ChampionUnavailable as e:
            logger.warning("gateway start: %s; serving v%s", e, self.bound_champion)
            return
        if moved is not None:  # the shadow's session ended with the swap (`shadow` stays None)
            _, self.champion, self.described = moved

    @app.get("/healthz")
    async def healthz(self) -> dict[str, Any]:
        described = await self._described()
        return {
            "status": "ok",
            "model": self.model,
            "version": described["version"],
            "shadow": self.candidate_version if self.shadow else None,
            "shadow_fraction": self.settings.shadow_fraction if self.shadow else None,
            "shadow_failures": self.shadow.failures if self.shadow else 0,
            "samples_queued_for_the_shadow": len(self.shadow.queued) if self.shadow else 0,
            "pairs_waiting_for_the_ledger": len(self.shadow.unsent) if self.shadow else 0,
            "pairs_dropped": self.shadow.dropped if self.shadow else 0,
            "answered_by_another_version": self.swapped,
        }

    @app.post("/predict")
    async def predict(self, request: Request) -> JSONResponse:
        if (refused := _refused(request, self.digests, "predict")) is not None:
            return refused
        described = await self._described()
        try:
            limits = self.settings.limits
            samples = parse_predict(await _json(request, limits.max_body_bytes), described["modality"], limits)
            assert self.champion is not None  # `_described` took it
            answered = await self.champion.answer.remote([s.payload for s in samples])
            if isinstance(answered, RequestError):
                raise answered
        except RequestError as e:
            return JSONResponse({"error": str(e), "model": self.model, "version": described["version"]}, e.status)
        version, answers = answered
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
        if version != described["version"]:
            self.swapped += 1  # a new champion answered: its pairs belong to no session of this gateway
        elif self.shadow is not None:
            self.shadow.send(samples, answers, time.time())
        return JSONResponse({"model": self.model, "version": version, "predictions": predictions})

    @app.post("/feedback")
    async def feedback(self, request: Request) -> JSONResponse:
        """Labels of ids this session shadowed (ledger.py `add_labels`: others are counted, not kept;
        an id's first label stands unless the body asks `"relabel": true`). The shadows in flight are
        awaited first, so every id answered before the labels were sent is known to the ledger."""
        if (refused := _refused(request, self.digests, "feedback")) is not None:
            return refused
        described = await self._described()
        if self.ledger is None:
            return JSONResponse({"error": "no shadow is served: labels are kept for a shadowed candidate"}, 409)
        try:
            body = await _json(request, self.settings.limits.max_body_bytes)
            pairs, relabel = parse_feedback(body, described["num_classes"]), wants_relabel(body)
        except RequestError as e:
            return JSONResponse({"error": str(e)}, e.status)
        if self.shadow is not None:
            await self.shadow.drain(timeout=60)
        return JSONResponse(await self.ledger.add_labels.remote(pairs, relabel))

    @app.get("/live")
    async def live(self, request: Request) -> JSONResponse:
        if (refused := _refused(request, self.digests, "predict")) is not None:
            return refused
        if self.ledger is None:
            return JSONResponse({"error": "no shadow is served"}, 409)
        figures = await self.ledger.figures.remote()
        described = await self._described()
        return JSONResponse(
            {"model": self.model, "champion": described["version"], "candidate": self.candidate_version, **figures}
        )

    @app.post("/champion")
    async def follow_champion(self, request: Request) -> JSONResponse:
        """Answer with the version the registry's `MODEL@champion` names from now on, once its own
        application (`version_app_name`) answers: the requests in flight finish on the old one. The
        registry is the authority, so a caller can only make the gateway catch up with a promotion.
        The shadow's session compared the old champion with its candidate: it ends here."""
        if (refused := _refused(request, self.digests, "control")) is not None:
            return refused
        described = await self._described()
        try:
            moved = await registry_champion(self.model, described["version"], timeout_s=60)
        except ChampionUnavailable as e:
            return JSONResponse({"error": str(e)}, 409)
        if moved is None:
            return JSONResponse({"model": self.model, "version": described["version"]})
        version, handle, answer = moved
        if self.shadow is not None:
            await self.shadow.drain(timeout=60)
        self.champion, self.described, self.shadow = handle, answer, None
        return JSONResponse({"model": self.model, "version": version})

    @app.post("/flush")
    async def flush(self, request: Request) -> Any:
        """Wait for the shadows in flight, then have the ledger write what it holds."""
        if (refused := _refused(request, self.digests, "control")) is not None:
            return refused
        if self.shadow is not None:
            await self.shadow.drain(timeout=60)
        if self.ledger is not None:
            await self.ledger.flush.remote()
        return {"flushed": True}


def _options(resources: Resources, env: dict[str, str]) -> dict[str, Any]:
    return {
        "num_replicas": resources.replicas,
        "ray_actor_options": {"num_cpus": resources.cpus, "num_gpus": resources.gpus, "runtime_env": {"env_vars": env}},
    }


def _device(resources: Resources) -> str:
    return "cuda" if resources.gpus > 0 else "cpu"


def version_application(
    model: str, version: str, settings: ServeSettings, resources: Resources, env: dict[str, str]
) -> Any:
    """One version as the champion (`version_app_name`): its replicas, `resources` each, with `env`
    (the driver's MLflow store) in their environment."""
    deployment = VersionModel.options(name="version", **_options(resources, env))  # type: ignore[attr-defined]  # @serve.deployment's
    return deployment.bind(model, version, settings, _device(resources))


def application(
    model: str,
    champion: str,
    candidate: str | None,
    run_id: str | None,
    candidate_run: str | None,
    settings: ServeSettings,
    env: dict[str, str],
    token_digests: dict[str, str | None] | None = None,
) -> Any:
    """The endpoint's application: the gateway (in front of the champion's own application) and, with
    a candidate (in its own application too), the ledger; `env` in every replica's environment; with
    `token_digests`, the gateway asks each route for its scope's token (access.py)."""
    ledger = None
    light = {"ray_actor_options": {"num_cpus": 0, "runtime_env": {"env_vars": env}}}
    if candidate is not None:
        assert run_id is not None and candidate_run is not None
        ledger = LiveLedger.options(**light).bind(run_id, candidate_run, settings)  # type: ignore[attr-defined]
    return Gateway.options(**light).bind(model, champion, candidate, ledger, settings, token_digests)  # type: ignore[attr-defined]
