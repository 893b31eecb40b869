"""`congruent demo`: v1 → v2 on Fashion-MNIST through the Ray pipeline and the MLflow registry, in
minutes: v1, then v2 with `method: auto` (see orchestrator/driver/demo.py), its candidates' table, the
verdict on the demo's promise and the HTML report (`congruent report`)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from orchestrator.commands.options import fail, fail_all, out_option, quiet_option
from orchestrator.views.format import percent

MODEL = "congruent-demo"  # the defaults --model names (orchestrator/driver/demo.py holds them)
TEXT_MODEL = "congruent-demo-text"


def versions_table(outcome: Any) -> str:
    """v1 and v2: registry version, method, ER, and v2's flips against v1."""
    from orchestrator.views.tables import table

    rows = []
    for result in outcome.results:
        vs_old = result.metrics.get("vs_old")
        rows.append(
            [
                result.version,
                f"v{result.registered_version}",
                result.method,
                percent(result.metrics["error_rate"]),
                *[percent(vs_old[k], none="undefined") if vs_old else "—" for k in ("nfr", "pfr", "rel_nfr")],
            ]
        )
    return table(["version", "registry", "method", "ER", "NFR vs v1", "PFR vs v1", "Rel-NFR"], rows, left=3)


def promise_lines(verdict: Any) -> list[str]:
    """What auto shipped against no treatment, and whether the update keeps the demo's promise."""
    checks = verdict.checks()
    marks = "; ".join(f"{text}: {'met' if ok else 'MISSED'}" for text, ok in checks)
    kept = all(ok for _, ok in checks)
    lines = [
        f"\nauto shipped {verdict.chosen}: NFR vs v1 {percent(verdict.nfr)} at ER {percent(verdict.er)}, against no "
        f"treatment's {percent(verdict.none_nfr)} at {percent(verdict.none_er)}.",
        f"The update {'keeps' if kept else 'does not keep'} the demo's promise — {marks}.",
    ]
    if not kept:
        lines.append(
            'docs/benchmarks/quality.md ("The demo") has the recorded runs of this demo and what they measured.'
        )
    return lines


def next_steps(outcome: Any, model: str, out: Path) -> str:
    """Where to look next: the report, the registry, the MLflow UI, the predictions, serving."""
    first, last, uri = outcome.results[0], outcome.results[-1], outcome.tracking_uri
    return (
        f"\nWhere to look next:\n"
        f"  report ({outcome.n_flips} negative flips of v{outcome.flipped_version} to explore): {outcome.report}\n"
        f"  registry: congruent versions {model} --matrix   (with MLFLOW_TRACKING_URI={uri})\n"
        f"  MLflow UI: mlflow ui --backend-store-uri {uri}\n"
        f"  predictions (.npy for congruent compare): {out}/v*/predictions/\n"
        f"  serve v1 as the champion with v{last.registered_version} ({last.version}) shadowed on live "
        f"requests (docs/guide/serve.md):\n"
        f"    congruent promote {model} {first.registered_version} --max-nfr 0 && "
        f"congruent serve {model} --shadow {last.registered_version}"
    )


def run(args: argparse.Namespace) -> int:
    from orchestrator.driver.auto import candidates_table
    from orchestrator.driver.demo import demo_settings, execute_demo
    from orchestrator.driver.launch import prepare_demo

    given = {k: getattr(args, k) for k in ("model", "epochs", "m", "seed", "train_limit", "eval_limit")}
    settings = demo_settings(
        Path(args.out or "demo-output").resolve(), args.text, legacy_weight=args.legacy_weight, **given
    )
    started = time.perf_counter()
    refused = prepare_demo(settings, out_given=args.out is not None)
    if refused is not None:
        return fail_all("demo", refused.problems, refused.code)
    try:
        outcome = execute_demo(settings, args.quiet, lambda text: print(text, flush=True))
    except KeyboardInterrupt:
        return fail("demo", "interrupted; the current run is marked KILLED", 130)
    first = outcome.results[0]
    print(
        f"\nDone in {time.perf_counter() - started:.0f} s. {settings.model}: v1 → v2 on "
        f"{first.n_eval} regression-eval samples (fingerprint {first.fingerprint}):\n"
    )
    print(versions_table(outcome))
    print(
        "\nv2's candidates against v1 (chosen on the validation split; the eval split shown, never chosen on):\n"
        + candidates_table(outcome.auto)
    )
    print("\n".join(promise_lines(outcome.verdict)))
    print(next_steps(outcome, settings.model, settings.out))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="v1 → v2 with method auto (no treatment, KD, FD, ELODI as candidates), on Ray, in minutes",
        parents=[out_option("where runs, the MLflow store and the report go (default: demo-output)"), quiet_option()],
    )
    parser.add_argument(
        "--text",
        action="store_true",
        help="the text demo: tweets, v1 a text-bag on half of them, v2 on all of them with method auto",
    )
    parser.add_argument(
        "--model", default=None, help=f"registered model name (default {MODEL}; with --text {TEXT_MODEL})"
    )
    parser.add_argument(
        "--epochs", type=int, default=None, help="v2's epochs (default 20, v1 trains half as many; --text: 5, v1 too)"
    )
    parser.add_argument("--m", type=int, default=4, help="the replicas of auto's ELODI candidates")
    parser.add_argument(
        "--legacy-weight",
        type=float,
        default=0.8,
        help="λ of ELODI Eq. 9 in auto's elodi-legacy candidate: the LDI toward the replicas' ensemble; 1 − λ pulls "
        "toward v1",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--train-limit",
        type=int,
        default=None,
        help="training samples (default: 8,000 of the 54,000 images, the demo's setting; all 27,280 tweets)",
    )
    parser.add_argument("--eval-limit", type=int, default=None, help="regression-eval samples (default: all)")
    parser.set_defaults(func=run)
