"""`congruent serve`: a registered model's champion on Ray Serve, a candidate shadowed beside it, and
the serving session's live run (orchestrator/serving/, orchestrator/tracking/live.py).

The versions are resolved here, before any Ray work: a model without a champion, a shadow that
names no version of the same model, or the champion itself as its own shadow is refused in one
line, and nothing is written to MLflow. The live run is created only then (or, for the same champion
and candidate as an earlier session, that session continued: `continue_live_run`), and marked FAILED
when the application does not start (a continued one FINISHED: its evidence stands).
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, replace
from typing import Any

from orchestrator.execution.cluster import connect
from orchestrator.host import worker_env
from orchestrator.serving.access import LOOPBACK, TOKEN_ENV, auth_headers, open_beyond_this_machine, scope_digests
from orchestrator.serving.credentials import Sealed, hand_over
from orchestrator.serving.deployments import application, version_application
from orchestrator.serving.handles import version_app_name
from orchestrator.serving.settings import Resources, ServeSettings
from orchestrator.tracking import registry, store
from orchestrator.tracking.live import continue_live_run, end_live_run, end_running_live_runs, record_window_size
from orchestrator.tracking.version_refs import RegistryError

ONE_CPU_REPLICA = Resources()
ALL_INTERFACES = ("0.0.0.0", "::")
PLACE_S = 120.0  # how long a version's replicas may take to be placed and answer (`--swap-timeout`)
PROXY_READY_S = "120"  # Serve's HTTP proxy's start on a loaded 2-core machine takes more than its 5 s


@dataclass(frozen=True)
class Served:
    """A running application: where it answers, which versions, its live run, how it was deployed."""

    model: str
    url: str
    app_name: str
    champion: str
    candidate: str | None
    live_run: str | None
    settings: ServeSettings
    resources: Resources
    sealed: Sealed | None = None  # the storage credentials its replicas are given (serving/credentials.py)


def app_name(model: str) -> str:
    return f"congruent-{model}"


def shadow_ref(model: str, shadow: str) -> str:
    """The registry reference a `--shadow` names: an alias or version of `model` (`challenger`, `3`),
    or a full reference (`MODEL@challenger`, `MODEL/3`)."""
    if "@" in shadow or "/" in shadow:
        return shadow
    return f"{model}/{shadow}" if shadow.isdigit() else f"{model}@{shadow}"


def resolve_versions(model: str, shadow: str | None, flag: str = "--shadow") -> tuple[str, str | None]:
    """(champion, candidate) versions; RegistryError (one line, naming `flag`) when they cannot be served."""
    champion = registry.resolve(f"{model}@champion").version
    if shadow is None:
        return champion, None
    candidate = registry.resolve(shadow_ref(model, shadow))
    if candidate.name != model:
        raise RegistryError(f"{flag} {shadow}: a version of {candidate.name}, not of {model}")
    if candidate.version == champion:
        raise RegistryError(f"{flag} {shadow}: version {champion} is the champion itself")
    return champion, candidate.version


def serve_model(
    model: str,
    shadow: str | None,
    settings: ServeSettings,
    host: str = "127.0.0.1",
    port: int = 8000,
    resources: Resources = ONE_CPU_REPLICA,
    place_s: float = PLACE_S,
    hand_over_credentials: bool = True,
) -> Served:
    """Start (or replace) the model's application on the cluster this process joins; return once it
    answers. RegistryError before anything starts when the versions cannot be served; ProxyRefused,
    before anything is deployed or written, when the cluster's proxy already listens beyond this
    machine and this environment has no token; NotPlaced when a version's replicas cannot be placed
    within `place_s`. A version whose application runs already keeps its replicas (`start_version`):
    `serve --stop` first to serve it on other resources. With `settings.canary`, `shadow` names the
    canary: it answers its share of ids, the champion shadows it (serving/canary.py). This environment's
    storage credentials are handed to the replicas (`hand_over_credentials`) for as long as this
    process lives (serving/credentials.py); without, they use their nodes' own."""
    store.configure()
    canary = settings.canary.fraction if settings.canary is not None else None
    champion, candidate = resolve_versions(model, shadow, "--shadow" if canary is None else "--canary")
    host, port = start_proxy(host, port)
    if host in LOOPBACK:  # only its own names: no web page rebound to 127.0.0.1 reaches it
        settings = replace(settings, allowed_hosts=LOOPBACK)
    from ray import serve

    run_id, candidate_run, continued = open_session(model, champion, candidate, canary, settings)
    sealed = hand_over(worker_env()) if hand_over_credentials else None
    name = app_name(model)
    fresh = name not in serve.status().applications  # else this start replaces a running gateway
    started: list[str] = []
    try:
        for version in (champion, candidate) if candidate else (champion,):
            if start_version(model, version, settings, resources, place_s, sealed):
                started.append(version_app_name(model, version))
        serve.run(
            application(
                model,
                champion,
                candidate,
                run_id,
                candidate_run,
                settings,
                replica_env(),
                scope_digests(),
                sealed,
            ),
            name=name,
            route_prefix="/",
        )
        for old in version_apps(model, keep=(champion, candidate)):  # an application replaced: its versions'
            serve.delete(old)
    except BaseException:  # a version not placed, Ctrl-C: nothing this start placed is left serving
        for app in ([name] if fresh else []) + started:
            serve.delete(app)
        if run_id is not None:  # a continued session keeps its evidence: ended, not failed
            end_live_run(run_id, failed=not continued)
        raise
    return Served(model, endpoint_url(host, port), name, champion, candidate, run_id, settings, resources, sealed)


def start_proxy(host: str, port: int) -> tuple[str, int]:
    """Join the cluster and start Serve's proxy on `host`:`port`; the host and port it listens on
    (an earlier serve's proxy keeps its own: it is the one that answers). ProxyRefused when it listens
    beyond this machine and this environment has no token."""
    os.environ.setdefault("RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S", PROXY_READY_S)
    from ray import serve

    connect(None)
    serve.start(http_options={"host": host, "port": port}, proxy_location="HeadOnly")
    host, port = proxy_address()
    if open_beyond_this_machine(host) is not None:
        raise ProxyRefused(
            f"Serve's proxy on this cluster listens on {host}:{port} already (an earlier serve; `serve shutdown` "
            f"stops it), open to other machines: set {TOKEN_ENV} (clients then send `Authorization: Bearer TOKEN`)"
        )
    return host, port


def open_session(
    model: str, champion: str, candidate: str | None, canary: float | None, settings: ServeSettings
) -> tuple[str | None, str | None, bool]:
    """(live run, candidate's version run, continued): with a candidate, the serving session of the
    two versions (a restart continues the earlier one's: `continue_live_run`), tagged with the ids
    its ledger keeps (its figures' window: live.py); (None, None, False) without one."""
    if candidate is None:
        return None, None, False
    candidate_run = registry.run_of(registry.resolve(f"{model}/{candidate}"))
    run_id, continued = continue_live_run(model, champion, candidate, canary)
    record_window_size(run_id, settings.max_live_ids, settings.max_live_ids_per_client)
    return run_id, candidate_run, continued


class ProxyRefused(RuntimeError):
    """Serve's proxy already listens where this serve may not open an endpoint (in one line)."""


def proxy_address() -> tuple[str, int]:
    """The host and port Serve's proxy on this cluster listens on: `serve.start` applies its options
    only when it starts Serve, and keeps those of a Serve already running (say, on 0.0.0.0 from a
    serve with a token; `serve --stop` deletes applications, not the proxy)."""
    from ray.serve.context import _get_global_client  # Serve's own CLI reads its options here too

    client = _get_global_client()
    assert client is not None, "serve.start connects this process first"
    return str(client.http_config.host), int(client.http_config.port)


def endpoint_url(host: str, port: int) -> str:
    """Where this driver reaches the endpoint (its own `/champion` and `/flush` calls): Serve's proxy
    runs on the head node (HeadOnly), which is another machine when the driver runs on another node
    (the compose `serve` service). Listening on every interface, the proxy is reached at its node's
    address; on a given address, at that one."""
    if host not in ALL_INTERFACES:
        return f"http://{host}:{port}"
    import ray
    from ray import serve

    proxies = set(serve.status().proxies)
    addresses = [node["NodeManagerAddress"] for node in ray.nodes() if node["Alive"] and node["NodeID"] in proxies]
    return f"http://{addresses[0] if addresses else '127.0.0.1'}:{port}"


def replica_env() -> dict[str, str]:
    """What the replicas need in their environment: this driver's MLflow store (absolute: an embedded
    one's path from here) for runs and the registry alike, as `store.configure` sets both here (never a
    secret: a replica's runtime_env is shown to all; the storage credentials are handed over apart,
    serving/credentials.py). The registry's URI is given as well: a Ray node started from a shell
    where `MLFLOW_REGISTRY_URI` named another store hands that to every replica, whose registry would
    then know no version of this model."""
    uri = store.tracking_uri()
    return {"MLFLOW_TRACKING_URI": uri, "MLFLOW_REGISTRY_URI": uri}


def canary_withdrawn(served: Served) -> str | None:
    """Why the gateway withdrew its canary (serving/canary_gate.py), once: the canary's application
    is deleted, its replicas' resources given back; None while it answers (or there is none)."""
    from ray import serve

    if served.settings.canary is None or served.candidate is None:
        return None
    canary = gateway_status(served.url, timeout=60).get("canary") or {}
    if canary.get("state") != "withdrawn":
        return None
    serve.delete(version_app_name(served.model, served.candidate))  # Serve lets its requests in flight finish
    return str(canary.get("reason", ""))


def champion_moved(served: Served) -> str | None:
    """The version the registry's `champion` alias names now, when it is no longer the served one."""
    champion = registry.resolve(f"{served.model}@champion").version
    return champion if champion != served.champion else None


def swap_champion(served: Served, champion: str, place_s: float = PLACE_S) -> Served:
    """Serve `champion` in place of the served one without dropping a request. The shadowed candidate
    already runs in its own application (`version_app_name`): nothing starts, the gateway moves to its
    replicas, so a cluster with no resources to spare swaps too. Another version's application is
    started beside the old champion's first; when its replicas are not placed (or do not answer)
    within `place_s`, it is deleted again and NotPlaced says so: the gateway never moved, the old
    champion and its shadow are served as before. Once the new champion answers the gateway moves to
    it (`POST /champion`, which follows the registry's alias); the requests in flight finish on the
    old one, whose application is then deleted (Serve waits for what it still answers). The live
    session compared the old champion with its candidate: the gateway stops shadowing, the ledger
    writes what it holds, and the session's run ends (FINISHED)."""
    from ray import serve

    started = start_version(served.model, champion, served.settings, served.resources, place_s, served.sealed)
    try:
        moved = _move_gateway(served.url)
    except BaseException:
        if started:  # the gateway did not move: the application started for it goes again
            serve.delete(version_app_name(served.model, champion))
        raise
    if moved.get("version") != champion:
        raise RegistryError(f"{served.model}@champion names v{moved.get('version')} now, not v{champion}")
    if served.live_run is not None:
        post(f"{served.url}/flush", {}, timeout=120, scope="control")
        end_live_run(served.live_run)
    for name in version_apps(served.model, keep=(champion,)):  # the old champion's (Serve lets it finish)
        serve.delete(name)
    return replace(served, champion=champion, candidate=None, live_run=None)


class NotPlaced(RuntimeError):
    """A version's replicas were not placed, or did not answer, in time; its application is deleted."""


def start_version(
    model: str,
    version: str,
    settings: ServeSettings,
    resources: Resources,
    place_s: float,
    sealed: Sealed | None = None,
) -> bool:
    """Run the version's own application (`version_app_name`), its replicas given the `sealed` storage
    credentials, and wait until it answers; False when it runs already (the shadowed candidate at a
    swap). NotPlaced (one line), with the application deleted, when it is not running within
    `place_s` or its deployment failed; deleted too when the wait is interrupted (Ctrl-C)."""
    from ray import serve

    name = version_app_name(model, version)
    if _app_status(name) == "RUNNING":
        return False
    target = version_application(model, version, settings, resources, replica_env(), sealed)
    serve.run_many([serve.RunTarget(target, name=name, route_prefix=None)], wait_for_applications_running=False)
    deadline = time.monotonic() + place_s
    try:
        while (status := _app_status(name)) != "RUNNING":
            if status == "DEPLOY_FAILED" or time.monotonic() > deadline:
                message = (serve.status().applications[name].message or "").strip().splitlines()
                asked = f"{resources.replicas} replica(s) of {resources.cpus:g} CPU, {resources.gpus:g} GPU"
                why = "its deployment failed" if status == "DEPLOY_FAILED" else f"not running within {place_s:g} s"
                detail = f": {message[0][:200]}" if message else ""
                raise NotPlaced(f"v{version} ({asked}) {why}{detail}; its application is deleted")
            time.sleep(0.5)
    except BaseException:
        serve.delete(name)
        raise
    return True


def _app_status(name: str) -> str | None:
    from ray import serve

    app = serve.status().applications.get(name)
    return None if app is None else str(getattr(app.status, "value", app.status))


def stop_serving(served: Served) -> None:
    """Let the shadows in flight finish and the ledger write what it holds, then delete the
    application and its versions' (the champion's, the candidate's) and close the live run (FINISHED).
    The replicas' storage credentials go with this process (serving/credentials.py)."""
    from ray import serve

    try:
        post(f"{served.url}/flush", {}, timeout=120, scope="control")
    finally:
        serve.delete(served.app_name)
        for name in version_apps(served.model):
            serve.delete(name)
        if served.live_run is not None:
            end_live_run(served.live_run)


def stop_app(model: str) -> bool:
    """Delete the model's applications on the cluster this process joins (the ledger writes what it
    holds as it shuts down) and close the model's running live runs; False when it is not served."""
    from ray import serve

    store.configure()
    connect(None)
    if app_name(model) not in serve.status().applications:
        return False
    serve.delete(app_name(model))  # the gateway first: it sends no more requests to the versions
    for name in version_apps(model):
        serve.delete(name)
    end_running_live_runs(model)
    return True


def version_apps(model: str, keep: tuple[str | None, ...] = ()) -> list[str]:
    """The model's version applications running on the cluster (`version_app_name`), but those of the
    versions in `keep`."""
    from ray import serve

    prefix = version_app_name(model, "")
    kept = {version_app_name(model, v) for v in keep if v is not None}
    return [
        name
        for name in serve.status().applications
        if name.startswith(prefix) and name.removeprefix(prefix).isdigit() and name not in kept
    ]


def _move_gateway(url: str, wait_s: float = 120.0) -> dict:
    """`POST /champion` until the gateway answers: its 409 (the registry or the new champion's
    application did not answer it yet, seen once in ~40 ms on a busy 2-core machine) is asked again
    each second for up to `wait_s`; after that, RegistryError with the gateway's own reason."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return post(f"{url}/champion", {}, timeout=120, scope="control")
        except urllib.error.HTTPError as e:
            if e.code != 409:
                raise
            reason = json.loads(e.read() or b"{}").get("error", "")
        if time.monotonic() > deadline:
            raise RegistryError(f"the gateway at {url} did not move to the new champion: {reason}")
        time.sleep(1.0)


def gateway_status(url: str, timeout: float = 30) -> dict[str, Any]:
    """The endpoint's `GET /status` (serving/status.py), with this environment's feedback token if any
    (HTTPError for a 4xx/5xx)."""
    request = urllib.request.Request(f"{url.rstrip('/')}/status", headers=auth_headers("feedback"))
    with urllib.request.urlopen(request, timeout=timeout) as response:
        answer: dict[str, Any] = json.loads(response.read())
    return answer


def post(url: str, body: object, timeout: float = 60, scope: str = "predict") -> dict:
    """JSON POST to the endpoint, with this environment's token of the route's `scope` (access.py) if
    any; its JSON answer (HTTPError for a 4xx/5xx)."""
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json", **auth_headers(scope)},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())
