"""`congruent serve MODEL [--shadow VERSION|ALIAS | --canary VERSION|ALIAS --fraction F --max-nfr F] ...`: the
model's champion behind one HTTP endpoint on Ray Serve, a candidate shadowed on a fraction of the
requests, or a canary answering a fraction of the ids (withdrawn or promoted on its live NFR), their
answers in the serving session's live ledger (docs/guide/serve.md)."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from orchestrator.commands.gate_options import add_gate_flags, parse_gate
from orchestrator.commands.options import fail, fail_all, fraction, positive, ray_address
from orchestrator.views.format import short_percent

if TYPE_CHECKING:  # the driver (and Ray) load when the command runs, not when the CLI starts
    from orchestrator.driver.serve import Served
    from orchestrator.driver.serve_command import CanaryRule, ServeSettings

GATE_FLAGS = ("max_nfr", "confidence", "min_live", "max_er_increase")  # a canary's gate: `promote --live`'s


def run(args: argparse.Namespace) -> int:
    from orchestrator.driver.serve import NotPlaced, ProxyRefused, serve_model, stop_app
    from orchestrator.driver.serve_command import RegistryError, Resources, open_beyond_this_machine
    from pipelines.spec import SpecError

    if args.stop:
        if not stop_app(args.model):
            return fail("serve", f"{args.model} is not served on this cluster")
        print(f"{args.model}: stopped")
        return 0
    if (problem := open_beyond_this_machine(args.host)) is not None:
        return fail("serve", problem)
    if args.detach and not args.ray_address:
        return fail("serve", "--detach leaves the application on a cluster: give --ray-address (or RAY_ADDRESS)")
    if (problem := canary_problem(args) or token_problem(args)) is not None:
        return fail("serve", problem)
    try:
        settings = serve_settings(args, canary_rule(args))
    except SpecError as e:
        return fail_all("serve", e.problems)
    if args.canary and args.fraction is None:  # after the gate's values: they are one line each first
        return fail("serve", "--canary asks for --fraction: the share of ids the canary answers (1 sends it every id)")
    try:
        resources = Resources(args.replicas, args.cpus, args.gpus)
        served: Served = serve_model(
            args.model,
            args.canary or args.shadow,
            settings,
            args.host,
            args.port,
            resources,
            args.swap_timeout,
            hand_over_credentials=not args.detach,  # they would outlive this process (serving/credentials.py)
        )
    except (RegistryError, NotPlaced, ProxyRefused) as e:
        return fail("serve", str(e))
    except KeyboardInterrupt:
        return fail("serve", f"interrupted while starting: {args.model}'s versions this start placed are deleted", 130)
    say_started(args, served, settings)
    if args.detach:
        print(f"stop it with: congruent serve {args.model} --stop --ray-address {args.ray_address}")
        return 0
    return follow_until_stopped(args, served)


def canary_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the canary's flags, in one line (None: nothing); their values are the
    gate's to check (`parse_gate`)."""
    if args.canary and args.shadow:
        return "--canary and --shadow: one candidate at a time (a canary's champion is its shadow)"
    if args.canary and args.max_nfr is None:
        return "--canary asks for --max-nfr: the live NFR beyond which the canary is withdrawn"
    if not args.canary and (args.auto_promote or args.max_nfr is not None or args.min_live is not None):
        return "--max-nfr, --min-live and --auto-promote decide a canary: give --canary VERSION"
    return None


def token_problem(args: argparse.Namespace) -> str | None:
    """Why a shadow or a canary cannot start with this environment's tokens (access.py), in one line
    naming the flag."""
    from orchestrator.driver.serve_command import scopes_not_their_own

    flag = "--auto-promote" if args.auto_promote else "--canary" if args.canary else "--shadow" if args.shadow else None
    return None if flag is None else scopes_not_their_own(flag)


def share(args: argparse.Namespace) -> float:
    """--fraction, 1 when not given (a shadow's default; a canary asks for it)."""
    return 1.0 if args.fraction is None else float(args.fraction)


def canary_rule(args: argparse.Namespace) -> CanaryRule | None:
    """The rule of `--canary`, from the gate its flags give (driver/serve_command.py); SpecError on a
    bad value."""
    from orchestrator.driver.serve_command import canary_rule as rule_of

    if not args.canary:
        return None
    return rule_of(parse_gate(args, GATE_FLAGS), share(args), args.auto_promote)


def serve_settings(args: argparse.Namespace, canary: CanaryRule | None) -> ServeSettings:
    """How the application serves, from the flags."""
    from orchestrator.driver.serve_command import RequestLimits, ServeSettings

    limits = RequestLimits(
        max_body_bytes=int(args.max_body_mb * 2**20),
        max_samples=args.max_samples,
        max_text_chars=args.max_text_chars,
        max_image_pixels=args.max_image_pixels,
        max_request_pixels=args.max_request_pixels,
    )
    return ServeSettings(
        limits=limits,
        max_batch_size=args.max_batch_size,
        batch_wait_s=args.batch_wait_ms / 1000,
        shadow_fraction=share(args),
        shadow_coalesce_s=args.shadow_coalesce_ms / 1000,
        chunk_rows=args.chunk_rows,
        flush_s=args.flush_s,
        threads=max(1, int(args.cpus)),
        call_timeout_s=args.call_timeout_s,
        max_shadow_bytes=int(args.max_shadow_mb * 2**20),
        max_live_ids=args.max_live_ids,
        max_live_ids_per_client=args.max_live_ids_per_client or max(1, args.max_live_ids // 2),
        canary=canary,
    )


def say_started(args: argparse.Namespace, served: Served, settings: ServeSettings) -> None:
    """What is served where, its live ledger, and how to call it."""
    from orchestrator.driver.serve import app_name
    from orchestrator.driver.serve_command import SCOPE_ENV, TOKEN_ENV, shared_scopes, storage_credentials_here

    shadow = f", shadowing v{served.candidate} on {share(args):.0%} of samples" if served.candidate else ""
    if served.candidate and settings.canary is not None:
        shadow = f", canary v{served.candidate} answering {share(args):.0%} of ids ({canary_terms(settings)})"
    print(f"{args.model}: serving champion v{served.champion}{shadow} at {served.url} (app {app_name(args.model)})")
    if served.live_run:
        print(f"live ledger: MLflow run {served.live_run}; `congruent versions {args.model}` shows its figures")
    if shared := shared_scopes():
        names = " and ".join(SCOPE_ENV[scope] for scope in shared)
        print(f"{' and '.join(shared)} take {TOKEN_ENV}: set {names} so that predicting clients cannot label or swap")
    if args.detach and storage_credentials_here():
        print("--detach: the replicas use their Ray nodes' own storage credentials (this environment's stay here)")
    token = f' -H "authorization: Bearer ${TOKEN_ENV}"' if os.environ.get(TOKEN_ENV) else ""
    print(f"try: curl -s {served.url}/predict{token} -H 'content-type: application/json' -d '{{\"inputs\": [...]}}'")


def follow_until_stopped(args: argparse.Namespace, served: Served) -> int:
    """Follow the champion alias and the canary until Ctrl-C, then stop serving (driver/serve_command.py)."""
    from orchestrator.driver.serve import stop_serving
    from orchestrator.driver.serve_command import follow

    print(
        f"it follows {args.model}@champion (checked every {args.follow_s:g} s): `congruent promote` swaps the "
        "served version without dropping requests. Ctrl-C stops it (the shadows in flight finish and the "
        "ledger is written first)"
    )
    served = follow(served, args.follow_s, args.swap_timeout)
    try:
        stop_serving(served)
    except OSError as e:  # the flush's call: the applications are deleted all the same
        problem = f"stopped, but {served.url} did not answer the flush ({e}); the ledger writes as it shuts down"
        return fail("serve", problem, 1)
    print(f"{args.model}: stopped")
    return 130


def canary_terms(settings: ServeSettings) -> str:
    rule = settings.canary
    assert rule is not None
    then = "promoted" if rule.auto_promote else "passed (then `congruent promote --live`)"
    return (
        f"withdrawn once its NFR's {short_percent(rule.confidence)} bound shows it above "
        f"{short_percent(rule.max_nfr)}, "
        f"{then} at {rule.min_labelled} labelled pairs within it"
    )


CANARY_GATE_HELP = {  # what a canary does with the gate's flags (the gate's own words are `promote`'s)
    "max_nfr": "--canary: withdrawn once the lower Wilson bound of its live NFR exceeds this, or the upper one "
    "does at --min-live labelled pairs; passed when the upper one is within it",
    "confidence": "--canary: the bounds' level (none: 0.95); with --auto-promote, the promotion gate's too",
    "min_live": "--canary: labelled canary pairs at which it is decided (default: the fewest whose bound can be "
    "within --max-nfr, as `promote --live`)",
    "max_er_increase": "--auto-promote: the promotion gate's largest ER increase over the champion on eval (0)",
}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve",
        parents=[ray_address()],
        help="serve a model's champion on Ray Serve, shadowing a candidate",
        description="Serve MODEL@champion behind one HTTP endpoint (POST /predict, POST /feedback, GET /live, "
        "GET /status, GET /healthz); with --shadow, a candidate answers a fraction of the samples too, off the "
        "response path, and the pairs go to the live ledger.",
    )
    parser.add_argument("model", help="the registered model's name; its alias `champion` is served")
    parser.add_argument("--shadow", metavar="VERSION|ALIAS", help="the candidate to shadow: a version or alias")
    parser.add_argument(
        "--canary",
        metavar="VERSION|ALIAS",
        help="a candidate that answers --fraction of the ids itself (the champion shadows it), withdrawn as "
        "soon as its live NFR shows above --max-nfr",
    )
    parser.add_argument(
        "--fraction",
        type=fraction(0.0, 1.0),
        default=None,
        help="share of samples also sent to the shadow (1); with --canary, the share of ids the canary answers "
        "(asked for: a canary's share is a choice)",
    )
    add_gate_flags(parser, GATE_FLAGS, helps=CANARY_GATE_HELP, required=False)
    parser.add_argument(
        "--auto-promote",
        action="store_true",
        help="--canary: promote it once it passes (`promote --live`'s gate, --max-er-increase on eval) and answer "
        "with it",
    )
    request_options(parser)
    ledger_options(parser)
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


def request_options(parser: argparse.ArgumentParser) -> None:
    """Where the endpoint listens, the replicas, and what one request may hold."""
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
        "--max-request-pixels",
        type=positive(int),
        default=4 * 4096 * 4096,
        help="pixels of all the images of one request, read from their headers (67108864 = 4 · 4096²): 400",
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


def ledger_options(parser: argparse.ArgumentParser) -> None:
    """The live ledger and batching."""
    parser.add_argument(
        "--max-live-ids",
        type=positive(int),
        default=250_000,
        help="ids whose pairs the live ledger holds to join labels to (250000, ~70 MB); a label for an id that "
        "left is counted unmatched; the figures count every id",
    )
    parser.add_argument(
        "--max-live-ids-per-client",
        type=positive(int),
        default=None,
        help="of them, the most one client (peer address) holds: one that floods ids pushes out its own oldest, "
        "not others' pairs waiting for labels (half of --max-live-ids)",
    )
    parser.add_argument(
        "--shadow-coalesce-ms",
        type=positive(float),
        default=5.0,
        help="how long the gateway gathers shadowed samples into one candidate call and one ledger append (5 ms)",
    )
    parser.add_argument("--max-batch-size", type=int, default=32, help="samples batched into one forward (32)")
    parser.add_argument("--batch-wait-ms", type=float, default=5.0, help="how long a batch waits to fill (5 ms)")
    parser.add_argument("--chunk-rows", type=int, default=512, help="live ledger rows per parquet chunk (512)")
    parser.add_argument("--flush-s", type=float, default=5.0, help="seconds before pending ledger rows are written (5)")
