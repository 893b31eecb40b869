"""`congruent demo`: v1 → v2 on Fashion-MNIST through the Ray pipeline and the MLflow registry, in
minutes: v1, v2 without treatment and v2 with ELODI (see orchestrator/driver/demo.py), then the
comparison table against v1 and the HTML report (`congruent report`)."""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from orchestrator.commands.options import fail, out_option, quiet_option
from orchestrator.views.format import percent

MODEL = "congruent-demo"


def run(args: argparse.Namespace) -> int:
    from orchestrator.driver.cluster import check_cluster, connect
    from orchestrator.driver.demo import DemoSettings, demo_specs, run_demo
    from orchestrator.driver.plan import check_output, preflight
    from orchestrator.driver.report import write_report
    from orchestrator.driver.watch import StageWatch
    from orchestrator.tracking.store import configure
    from orchestrator.views.progress import make_display
    from orchestrator.views.tables import table
    from pipelines.spec import SpecError, parse_spec

    out = Path(args.out or "demo-output").resolve()
    settings = DemoSettings(out, args.model, args.epochs, args.m, args.seed, args.train_limit, args.eval_limit)
    started = time.perf_counter()
    try:
        check_output(out, "--out" if args.out else None)
        specs = [parse_spec(document) for document in demo_specs(settings)]  # --m, --epochs … in range
        preflight(specs[0])  # the data is there (make demo installs it)
        elodi = specs[-1]  # the largest demand: replicas, then the student beside the teacher pool
        check_cluster(elodi, None, True, True, elodi.resources.teacher_actors)
    except SpecError as e:
        return fail("demo", str(e))
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("MLFLOW_TRACKING_URI", f"sqlite:///{out / 'mlflow.db'}")
    connect(None)
    configure()
    watch = StageWatch(make_display(args.quiet))
    try:
        results = run_demo(settings, watch, lambda text: print(text, flush=True))
    except KeyboardInterrupt:
        return fail("demo", "interrupted; the current run is marked KILLED", 130)
    finally:
        watch.close()
    report, data = write_report(args.model, out / "report.html")
    uri = os.environ["MLFLOW_TRACKING_URI"]
    rows = []
    for result in results:
        vs_old = result.metrics.get("vs_old")
        rows.append([result.version, f"v{result.registered_version}", result.method, percent(result.metrics["error_rate"]),
                     *[percent(vs_old[k], none="undefined") if vs_old else "—" for k in ("nfr", "pfr", "rel_nfr")]])
    print(f"\nDone in {time.perf_counter() - started:.0f} s. {args.model}: v1 → v2 on "
          f"{results[0].n_eval} regression-eval samples (fingerprint {results[0].fingerprint}):\n")
    print(table(["version", "registry", "method", "ER", "NFR vs v1", "PFR vs v1", "Rel-NFR"], rows, left=3))
    paragon = results[-1].metrics.get("paragon_vs_old")
    if paragon is not None:
        print(f"\nThe {args.m}-replica ensemble ELODI distilled (the paragon): ER {percent(paragon['er_new'])}, "
              f"NFR vs v1 {percent(paragon['nfr'])}.")
    print(f"\nWhere to look next:\n"
          f"  report ({data.n_flips} negative flips of v{data.version} to explore): {report}\n"
          f"  registry: congruent versions {args.model} --matrix   (with MLFLOW_TRACKING_URI={uri})\n"
          f"  MLflow UI: mlflow ui --backend-store-uri {uri}\n"
          f"  predictions (.npy for congruent compare): {out}/v*/predictions/")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo", help="v1 → v2 without treatment and with ELODI, on Ray, in minutes",
        parents=[out_option("where runs, the MLflow store and the report go (default: demo-output)"), quiet_option()])
    parser.add_argument("--model", default=MODEL, help=f"registered model name (default {MODEL})")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--m", type=int, default=4, help="ELODI replicas")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train-limit", type=int, default=24000, help="training samples (of 54,000)")
    parser.add_argument("--eval-limit", type=int, default=None, help="regression-eval samples (default: all)")
    parser.set_defaults(func=run)
