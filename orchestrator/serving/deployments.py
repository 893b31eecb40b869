"""The Ray Serve applications of `congruent serve`: one HTTP endpoint in front of a model's champion
and, with a shadow, its candidate.

- `Gateway` (the ingress of the application `congruent-MODEL`): `POST /predict` answers with the
  champion's classes; the samples the shadow fraction picks go to the candidate as well, in a task
  of their own (shadow.py: the client never waits for the shadow; a slow or failed shadow is
  counted, never fails a request). `POST /feedback` takes labels; `GET /live` the live figures and
  `GET /status` the gateway's state (status.py), both in the feedback scope; `GET /healthz` only
  whether it answers; `POST /champion` moves to the version the registry's alias names (a swap). A
  replica that starts after a swap serves the registry's champion too. With a token (access.py),
  every route but `/healthz` asks for it.
- `VersionModel` (version_model.py): one registered version, loaded from the registry with its own tokenizer / input
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
import logging
import time
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from ray import serve
from ray.serve.handle import DeploymentHandle

from orchestrator.serving import canary_gate, credentials
from orchestrator.serving.access import refusal
from orchestrator.serving.canary import CanaryState
from orchestrator.serving.credentials import Sealed
from orchestrator.serving.handles import awaited, version_handle, within
from orchestrator.serving.ledger import LiveLedger
from orchestrator.serving.requests import (
    RequestError,
    client_of,
    parse_feedback,
    parse_predict,
    read_json,
    wants_relabel,
)
from orchestrator.serving.settings import Resources, ServeSettings
from orchestrator.serving.shadow import Shadow
from orchestrator.serving.status import HEALTHY, gateway_status
from orchestrator.serving.version_model import VersionModel

logger = logging.getLogger("ray.serve")


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
        answer = await asyncio.wait_for(awaited(handle.describe.remote()), timeout=timeout_s)
    except Exception as e:  # noqa: BLE001  # its application is not deployed (yet)
        raise ChampionUnavailable(f"v{version} is not deployed: {type(e).__name__}") from None
    return version, handle, answer


# what the routes call is defined above or imported: `serve.ingress` captures the class with the
# module's names as they are when it is decorated
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
        live_run: str | None = None,
        sealed: Sealed | None = None,
    ) -> None:
        credentials.load_into_replica(sealed)
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
        self.live_run = live_run
        # with a canary, the candidate answers its share of ids and the champion is the shadow (canary.py)
        self.canary = CanaryState(settings.canary, candidate) if settings.canary and candidate else None

    async def _described(self) -> dict[str, Any]:
        async with self.starting:
            if self.described is None:
                await self._catch_up()
                if self.described is not None and self.canary is not None:  # a promotion since: it is over
                    self.canary.state, self.canary.reason = "ended", f"the champion is v{self.described['version']}"
            if self.described is None:
                self.champion = version_handle(self.model, self.bound_champion)
                self.described = await within(self.champion.describe.remote(), self.settings.call_timeout_s)
                self.shadow = self._shadow()
                if self.canary is not None:
                    await canary_gate.restore(self)
        return self.described

    def _shadow(self) -> Shadow | None:
        """The candidate's shadow, when one is served: its answers go with the champion's to the ledger."""
        if self.candidate_version is None or self.ledger is None:
            return None
        ledger = self.ledger
        # a canary's shadow is the champion (a withdrawn canary's application may be gone: no handle to it)
        asked = version_handle(self.model, self.candidate_version) if self.canary is None else self.champion
        assert asked is not None
        return Shadow(
            lambda payloads: asked.answer.remote(payloads),
            lambda rows: within(ledger.add_pairs.remote(rows), self.settings.call_timeout_s),
            self.settings.shadow_fraction if self.canary is None else 1.0,  # the canary's share picks its ids
            coalesce_s=self.settings.shadow_coalesce_s,
            max_queued_bytes=self.settings.max_shadow_bytes,
            timeout_s=self.settings.call_timeout_s,
            answered_by_candidate=self.canary is not None,
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
        await self._described()
        return HEALTHY

    @app.get("/status")
    async def status(self, request: Request) -> JSONResponse:
        if (refused := refusal(request, self.digests, "feedback", self.settings.allowed_hosts)) is not None:
            return refused
        described = await self._described()
        return JSONResponse(gateway_status(self, described["version"]))

    @app.post("/predict")
    async def predict(self, request: Request) -> JSONResponse:
        if (refused := refusal(request, self.digests, "predict", self.settings.allowed_hosts)) is not None:
            return refused
        described = await self._described()
        try:
            limits, limits_s = self.settings.limits, self.settings.call_timeout_s
            body = await read_json(request, limits.max_body_bytes)
            samples = parse_predict(body, described["modality"], limits, client_of(request))
            answered = await self._answer(samples, limits_s)
        except TimeoutError:
            problem = f"v{described['version']} did not answer within {limits_s:g} s (--call-timeout-s)"
            return JSONResponse({"error": problem, "model": self.model, "version": described["version"]}, 504)
        except RequestError as e:
            return JSONResponse({"error": str(e), "model": self.model, "version": described["version"]}, e.status)
        version, answers, by = answered
        names = described["class_names"]
        predictions = [
            {
                "id": s.id,
                "version": v,
                "class": k,
                **({"name": names[k]} if names and k < len(names) else {}),
                "probability": p,
            }
            for s, (k, p), v in zip(samples, answers, by)
        ]
        if version != described["version"]:
            self.swapped += 1  # a new champion answered: its pairs belong to no session of this gateway
        elif self.shadow is not None:
            shadowed = [i for i, v in enumerate(by) if v == self.candidate_version] if self.canary else None
            if shadowed is None:
                self.shadow.send(samples, answers, time.time())
            elif shadowed:
                self.shadow.send([samples[i] for i in shadowed], [answers[i] for i in shadowed], time.time())
        return JSONResponse({"model": self.model, "version": version, "predictions": predictions})

    async def _answer(self, samples: list, timeout_s: float) -> tuple[str, list, list[str]]:
        """(the champion's version, each sample's (class, probability), the version that answered it):
        the champion answers, but a canary's share of ids, which its candidate answers (canary.py)."""
        assert self.champion is not None  # `_described` took it
        mine = [i for i, s in enumerate(samples) if self.canary is not None and self.canary.answers(s.id)]
        canary_ids = set(mine)
        rest = [i for i in range(len(samples)) if i not in canary_ids]
        calls = [self.champion.answer.remote([samples[i].payload for i in rest])] if rest else []
        if mine:
            candidate = version_handle(self.model, self.candidate_version or "")
            calls.append(candidate.answer.remote([samples[i].payload for i in mine]))
        results = await asyncio.gather(*(within(call, timeout_s) for call in calls))
        for result in results:
            if isinstance(result, RequestError):
                raise result
        answers: list = [None] * len(samples)
        by: list[str] = [""] * len(samples)
        version = results[0][0] if rest else (self.described or {}).get("version", "")
        for indices, (answered_by, group) in zip([rest, mine] if rest else [mine], results):
            for i, answer in zip(indices, group):
                answers[i], by[i] = answer, answered_by
        return version, answers, by

    @app.post("/feedback")
    async def feedback(self, request: Request) -> JSONResponse:
        """Labels of ids this session shadowed (ledger.py `add_labels`: others are counted, not kept;
        an id's first label stands unless the body asks `"relabel": true`). The shadows in flight are
        awaited first, so every id answered before the labels were sent is known to the ledger."""
        if (refused := refusal(request, self.digests, "feedback", self.settings.allowed_hosts)) is not None:
            return refused
        described = await self._described()
        if self.ledger is None:
            return JSONResponse({"error": "no shadow is served: labels are kept for a shadowed candidate"}, 409)
        try:
            body = await read_json(request, self.settings.limits.max_body_bytes)
            pairs, relabel = parse_feedback(body, described["num_classes"]), wants_relabel(body)
        except RequestError as e:
            return JSONResponse({"error": str(e)}, e.status)
        if self.shadow is not None:
            await self.shadow.drain(timeout=self.settings.call_timeout_s)
        try:
            added = await within(self.ledger.add_labels.remote(pairs, relabel), self.settings.call_timeout_s)
            if self.canary is not None:
                added["canary"] = await canary_gate.decide(self)
        except TimeoutError:
            return JSONResponse({"error": "the live ledger did not answer in time: send the labels again"}, 504)
        return JSONResponse(added)

    @app.get("/live")
    async def live(self, request: Request) -> JSONResponse:
        if (refused := refusal(request, self.digests, "feedback", self.settings.allowed_hosts)) is not None:
            return refused
        if self.ledger is None:
            return JSONResponse({"error": "no shadow is served"}, 409)
        try:
            figures = await within(self.ledger.figures.remote(), self.settings.call_timeout_s)
        except TimeoutError:
            return JSONResponse({"error": "the live ledger did not answer in time"}, 504)
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
        if (refused := refusal(request, self.digests, "control", self.settings.allowed_hosts)) is not None:
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
            await self.shadow.drain(timeout=self.settings.call_timeout_s)
        self.champion, self.described, self.shadow = handle, answer, None
        if self.canary is not None and self.canary.state in ("running", "passed"):
            promoted = version == self.canary.version
            self.canary.state, self.canary.reason = ("promoted", "promoted") if promoted else ("ended", f"v{version}")
        return JSONResponse({"model": self.model, "version": version})

    @app.post("/flush")
    async def flush(self, request: Request) -> Any:
        """Wait for the shadows in flight, then have the ledger write what it holds."""
        if (refused := refusal(request, self.digests, "control", self.settings.allowed_hosts)) is not None:
            return refused
        if self.shadow is not None:
            await self.shadow.drain(timeout=self.settings.call_timeout_s)
        if self.ledger is not None:
            try:
                await within(self.ledger.flush.remote(), self.settings.call_timeout_s)
            except TimeoutError:
                return JSONResponse({"error": "the live ledger did not write in time"}, 504)
        return {"flushed": True}


def _options(resources: Resources, env: dict[str, str]) -> dict[str, Any]:
    return {
        "num_replicas": resources.replicas,
        "ray_actor_options": {"num_cpus": resources.cpus, "num_gpus": resources.gpus, "runtime_env": {"env_vars": env}},
    }


def _device(resources: Resources) -> str:
    return "cuda" if resources.gpus > 0 else "cpu"


def version_application(
    model: str,
    version: str,
    settings: ServeSettings,
    resources: Resources,
    env: dict[str, str],
    sealed: Sealed | None = None,
) -> Any:
    """One version as the champion (`version_app_name`): its replicas, `resources` each, with `env`
    (the driver's MLflow store) in their environment and `sealed` storage credentials (credentials.py)."""
    deployment = VersionModel.options(name="version", **_options(resources, env))  # type: ignore[attr-defined]  # @serve.deployment's
    return deployment.bind(model, version, settings, _device(resources), sealed)


def application(
    model: str,
    champion: str,
    candidate: str | None,
    run_id: str | None,
    candidate_run: str | None,
    settings: ServeSettings,
    env: dict[str, str],
    token_digests: dict[str, str | None] | None = None,
    sealed: Sealed | None = None,
) -> Any:
    """The endpoint's application: the gateway (in front of the champion's own application) and, with
    a candidate (in its own application too), the ledger; `env` in every replica's environment and
    `sealed` storage credentials (credentials.py); with `token_digests`, the gateway asks each route
    for its scope's token (access.py)."""
    ledger = None
    light = {"ray_actor_options": {"num_cpus": 0, "runtime_env": {"env_vars": env}}}
    if candidate is not None:
        assert run_id is not None and candidate_run is not None
        ledger = LiveLedger.options(**light).bind(run_id, candidate_run, settings, sealed)  # type: ignore[attr-defined]
    return Gateway.options(**light).bind(  # type: ignore[attr-defined]
        model, champion, candidate, ledger, settings, token_digests, run_id, sealed
    )
