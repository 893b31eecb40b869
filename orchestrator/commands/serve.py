"""`congruent serve MODEL [--shadow VERSION|ALIAS] ...`: the model's champion behind one HTTP
endpoint on Ray Serve, a candidate shadowed on a fraction of the requests, their answers in the
serving session's live ledger (README, "Serving")."""

from __future__ import annotations

import argparse
import os
import time
from typing import TYPE_CHECKING

from orchestrator.commands.options import fail, fraction, positive, ray_address

if TYPE_CHECKING:  # the driver (and Ray) load when the command runs, not when the CLI starts
    from orchestrator.driver.serve import Served


def run(args: argparse.Namespace) -> int:
    from orchestrator.driver.serve import NotPlaced, ProxyRefused, app_name, serve_model, stop_app, stop_serving
    from orchestrator.serving.access import SCOPE_ENV, TOKEN_ENV, open_beyond_this_machine, shared_scopes
    from orchestrator.serving.settings import RequestLimits, Resources, ServeSettings
    from orchestrator.tracking.version_refs import RegistryError

    if args.stop:
        if not stop_app(args.model):
            return fail("serve", f"{args.model} is not served on this cluster")
        print(f"{args.model}: stopped")
        return 0
    if (problem := open_beyond_this_machine(args.host)) is not None:
        return fail("serve", problem)
    if args.detach and not args.ray_address:
        return fail("serve", "--detach leaves the application on a cluster: give --ray-address (or RAY_ADDRESS)")
    limits = RequestLimits(
        max_body_bytes=int(args.max_body_mb * 2**20),
        max_samples=args.max_samples,
        max_text_chars=args.max_text_chars,
        max_image_pixels=args.max_image_pixels,
    )
    settings = ServeSettings(
        limits=limits,
        max_batch_size=args.max_batch_size,
        batch_wait_s=args.batch_wait_ms / 1000,
        shadow_fraction=args.fraction,
        chunk_rows=args.chunk_rows,
        flush_s=args.flush_s,
        threads=max(1, int(args.cpus)),
        call_timeout_s=args.call_timeout_s,
        max_shadow_bytes=int(args.max_shadow_mb * 2**20),
    )
    try:
        resources = Resources(args.replicas, args.cpus, args.gpus)
        served: Served = serve_model(
            args.model, args.shadow, settings, args.host, args.port, resources, args.swap_timeout
        )
    except (RegistryError, NotPlaced, ProxyRefused) as e:
        return fail("serve", str(e))
    shadow = f", shadowing v{served.candidate} on {args.fraction:.0%} of samples" if served.candidate else ""
    print(f"{args.model}: serving champion v{served.champion}{shadow} at {served.url} (app {app_name(args.model)})")
    if served.live_run:
        print(f"live ledger: MLflow run {served.live_run}; `congruent versions {args.model}` shows its figures")
    if shared := shared_scopes():
        names = " and ".join(SCOPE_ENV[scope] for scope in shared)
        print(f"{' and '.join(shared)} take {TOKEN_ENV}: set {names} so that predicting clients cannot label or swap")
    token = f' -H "authorization: Bearer ${TOKEN_ENV}"' if os.environ.get(TOKEN_ENV) else ""
    print(f"try: curl -s {served.url}/predict{token} -H 'content-type: application/json' -d '{{\"inputs\": [...]}}'")
    if args.detach:
        print(f"stop it with: congruent serve {args.model} --stop --ray-address {args.ray_address}")
        return 0
    print(
        f"it follows {args.model}@champion (checked every {args.follow_s:g} s): `congruent promote` swaps the "
        "served version without dropping requests. Ctrl-C stops it (the shadows in flight finish and the "
        "ledger is written first)"
    )
    unplaced: set[str] = set()
    try:
        while True:
            time.sleep(args.follow_s)
            served = follow_champion(served, args.swap_timeout, unplaced)
    except KeyboardInterrupt:
        try:
            stop_serving(served)
        except OSError as e:  # the flush's call: the applications are deleted all the same
            problem = f"stopped, but {served.url} did not answer the flush ({e}); the ledger writes as it shuts down"
            return fail("serve", problem, 1)
        print(f"{args.model}: stopped")
        return 130


def follow_champion(served: Served, place_s: float = 120.0, unplaced: set[str] | None = None) -> Served:
    """Swap the served champion when the registry's alias moved (a promotion); the registry being out
    of reach, or a swap that failed, is said and tried again at the next check, while serving goes on.
    A version whose replicas could not be placed within `place_s` is rolled back (its application
    deleted, the old champion and its shadow served on), said once, and added to `unplaced`: not tried
    again until the alias names another version (or serve restarts)."""
    from mlflow.exceptions import MlflowException

    from orchestrator.driver.serve import NotPlaced, champion_moved, swap_champion
    from orchestrator.tracking.version_refs import RegistryError

    unplaced = set() if unplaced is None else unplaced

    try:
        moved = champion_moved(served)
    except (MlflowException, OSError, RegistryError) as e:  # MLflow down, the alias removed: keep serving
        print(f"{served.model}: the registry did not answer ({type(e).__name__}); serving v{served.champion}")
        return served
    if moved is None or moved in unplaced:
        return served
    ended = f"; the live session of v{served.candidate} ended" if served.candidate else ""
    print(f"{served.model}: champion moved to v{moved}: swapping v{served.champion} for it{ended}")
    try:
        swapped = swap_champion(served, moved, place_s)
    except NotPlaced as e:
        unplaced.add(moved)
        shadow = f" shadowing v{served.candidate}" if served.candidate else ""
        print(f"{served.model}: rolled back, serving v{served.champion}{shadow} until the alias moves again: {e}")
        return served
    except (RegistryError, OSError, ValueError, RuntimeError) as e:  # a deploy or the gateway failed: retried
        print(f"{served.model}: the swap failed ({type(e).__name__}: {e}); tried again at the next check")
        return served
    print(f"{served.model}: serving champion v{moved} at {served.url}")
    return swapped


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve",
        parents=[ray_address()],
        help="serve a model's champion on Ray Serve, shadowing a candidate",
        description="Serve MODEL@champion behind one HTTP endpoint (POST /predict, POST /feedback, GET /live, "
        "GET /healthz); with --shadow, a candidate answers a fraction of the samples too, off the response "
        "path, and the pairs go to the live ledger.",
    )
    parser.add_argument("model", help="the registered model's name; its alias `champion` is served")
    parser.add_argument("--shadow", metavar="VERSION|ALIAS", help="the candidate to shadow: a version or alias")
    parser.add_argument(
        "--fraction", type=fraction(0.0, 1.0), default=1.0, help="share of samples also sent to the shadow (1)"
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address the endpoint listens on (127.0.0.1); any other asks for CONGRUENT_SERVE_TOKEN, which "
        "every route but /healthz then asks of its clients (Authorization: Bearer TOKEN)",
    )
    parser.add_argument("--port", type=int, default=8000, help="its port (8000)")
    parser.add_argument("--replicas", type=int, default=1, help="replicas of each version (1)")
    parser.add_argument("--cpus", type=float, default=1.0, help="CPUs of each version replica (1)")
    parser.add_argument("--gpus", type=float, default=0.0, help="GPUs of each version replica (0)")
    parser.add_argument("--max-body-mb", type=positive(float), default=16.0, help="largest request body, MiB (16): 413")
    parser.add_argument("--max-samples", type=positive(int), default=256, help="samples in one request (256): 400")
    parser.add_argument("--max-text-chars", type=positive(int), default=100_000, help="characters of one text (100000)")
    parser.add_argument(
        "--max-image-pixels",
        type=positive(int),
        default=4096 * 4096,
        help="pixels of one image, read from its header before any decode (16777216 = 4096²): 400",
    )
    parser.add_argument(
        "--call-timeout-s",
        type=positive(float),
        default=60.0,
        help="seconds the gateway waits for another replica (60): the champion's answer (504 past it), the "
        "candidate's (a failed shadow), the ledger's",
    )
    parser.add_argument(
        "--max-shadow-mb",
        type=positive(float),
        default=64.0,
        help="inputs the gateway holds for a slow candidate, MiB (64); beyond, the oldest are dropped, counted",
    )
    parser.add_argument("--max-batch-size", type=int, default=32, help="samples batched into one forward (32)")
    parser.add_argument("--batch-wait-ms", type=float, default=5.0, help="how long a batch waits to fill (5 ms)")
    parser.add_argument("--chunk-rows", type=int, default=512, help="live ledger rows per parquet chunk (512)")
    parser.add_argument("--flush-s", type=float, default=5.0, help="seconds before pending ledger rows are written (5)")
    parser.add_argument(
        "--follow-s", type=float, default=5.0, help="seconds between checks of MODEL@champion for a promotion (5)"
    )
    parser.add_argument(
        "--swap-timeout",
        type=float,
        default=120.0,
        help="seconds a version's replicas may take to be placed and answer, at the start or a swap; a swap "
        "that takes longer is rolled back (120)",
    )
    parser.add_argument("--detach", action="store_true", help="leave it running on the cluster and return")
    parser.add_argument("--stop", action="store_true", help="stop the model's application on the cluster")
    parser.set_defaults(func=run)
