"""`congruent demo`: v1 → v2 on Fashion-MNIST through the Ray pipeline and the MLflow registry, in
minutes: v1, then v2 with `method: auto` (see orchestrator/driver/demo.py), its candidates' table, the
verdict on the demo's promise and the HTML report (`congruent report`)."""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from orchestrator.commands.options import check_output, fail, out_option, quiet_option
from orchestrator.views.format import percent

MODEL = "congruent-demo"
TEXT_MODEL = "congruent-demo-text"


def run(args: argparse.Namespace) -> int:
    from orchestrator.driver.auto import AutoRecord, candidates_table
    from orchestrator.driver.demo import (
        IMAGE_TRAIN_LIMIT,
        TEXT_EPOCHS,
        TEXT_TRAIN_LIMIT,
        DemoSettings,
        demo_specs,
        run_demo,
    )
    from orchestrator.driver.report import write_report
    from orchestrator.execution.cluster import check_cluster, connect
    from orchestrator.execution.watch import StageWatch
    from orchestrator.planning.plan import cluster_demand
    from orchestrator.planning.preflight import preflight
    from orchestrator.tracking.store import configure
    from orchestrator.views.progress import make_display
    from orchestrator.views.tables import table
    from pipelines.spec import SpecError, parse_spec
    from workers.trial_choice import CandidateScore

    out = Path(args.out or "demo-output").resolve()
    import torch

    gpus = 1.0 if torch.cuda.is_available() else 0.0  # on a GPU machine the demo trains there
    model = args.model or (TEXT_MODEL if args.text else MODEL)
    epochs = args.epochs or (TEXT_EPOCHS if args.text else 20)
    train_limit = args.train_limit or (TEXT_TRAIN_LIMIT if args.text else IMAGE_TRAIN_LIMIT)
    settings = DemoSettings(
        out, model, epochs, args.m, args.seed, train_limit, args.eval_limit, args.legacy_weight, gpus, args.text
    )
    started = time.perf_counter()
    try:
        check_output(out, "--out" if args.out else None)
        specs = [parse_spec(document) for document in demo_specs(settings)]  # --m, --epochs … in range
        preflight(specs[0])  # the data is there (make demo installs it)
        demand = cluster_demand(specs[-1])  # v2's: auto's replicas, then its candidates
        check_cluster(specs[-1], None, demand.replicas, demand.student, demand.pool_actors)
    except SpecError as e:
        return fail("demo", str(e))
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("MLFLOW_TRACKING_URI", f"sqlite:///{out / 'mlflow.db'}")
    connect(None)
    configure()
    watch = StageWatch(make_display(args.quiet))
    try:
        results, verdict = run_demo(settings, watch, lambda text: print(text, flush=True))
    except KeyboardInterrupt:
        return fail("demo", "interrupted; the current run is marked KILLED", 130)
    finally:
        watch.close()
    report, data = write_report(model, out / "report.html")
    uri = os.environ["MLFLOW_TRACKING_URI"]
    rows = []
    for result in results:
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
    print(
        f"\nDone in {time.perf_counter() - started:.0f} s. {model}: v1 → v2 on "
        f"{results[0].n_eval} regression-eval samples (fingerprint {results[0].fingerprint}):\n"
    )
    print(table(["version", "registry", "method", "ER", "NFR vs v1", "PFR vs v1", "Rel-NFR"], rows, left=3))
    auto = results[-1].auto
    assert auto is not None
    record = AutoRecord(auto["chosen"], auto["max_er_increase"], [CandidateScore(**c) for c in auto["candidates"]], [])
    print(
        "\nv2's candidates against v1 (chosen on the validation split; the eval split shown, never chosen on):\n"
        + candidates_table(record)
    )
    checks = verdict.checks()
    marks = "; ".join(f"{text}: {'met' if ok else 'MISSED'}" for text, ok in checks)
    kept = all(ok for _, ok in checks)
    print(
        f"\nauto shipped {verdict.chosen}: NFR vs v1 {percent(verdict.nfr)} at ER {percent(verdict.er)}, against no "
        f"treatment's {percent(verdict.none_nfr)} at {percent(verdict.none_er)}."
    )
    print(f"The update {'keeps' if kept else 'does not keep'} the demo's promise — {marks}.")
    if not kept:
        print('docs/benchmarks/quality.md ("The demo") has the recorded runs of this demo and what they measured.')
    print(
        f"\nWhere to look next:\n"
        f"  report ({data.n_flips} negative flips of v{data.version} to explore): {report}\n"
        f"  registry: congruent versions {model} --matrix   (with MLFLOW_TRACKING_URI={uri})\n"
        f"  MLflow UI: mlflow ui --backend-store-uri {uri}\n"
        f"  predictions (.npy for congruent compare): {out}/v*/predictions/\n"
        f"  serve v1 as the champion with v{results[-1].registered_version} ({results[-1].version}) shadowed on live "
        f"requests (docs/guide/serve.md):\n"
        f"    congruent promote {model} {results[0].registered_version} --max-nfr 0 && "
        f"congruent serve {model} --shadow {results[-1].registered_version}"
    )
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
