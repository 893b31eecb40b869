"""`congruent demo`: a real model update on Fashion-MNIST through the Ray pipeline, in minutes.

Three update pipelines on an embedded local Ray, tracked in a local MLflow store (`<out>/mlflow.db`
unless MLFLOW_TRACKING_URI is set) and registered as versions of `congruent-demo`:

    v1        a small MLP (784-128) trained on half of the images — the deployed "old" model
    v2-none   the new architecture (784-512-512 MLP) on all of them, trained without treatment
    v2-elodi  the same architecture with ELODI: m replicas in parallel, distilled online into one

then the comparison table against v1 and the HTML report (`congruent report`).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from orchestrator.compare import format_percent, format_table
from pipelines.spec import SpecError, UpdateSpec, parse_spec

MODEL = "congruent-demo"


def demo_specs(out: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The three spec documents; v2's `old` is filled in with v1's registered version."""
    common = {
        "model": args.model,
        "data": {"dataset": "fashion-mnist", "train_limit": args.train_limit, "eval_limit": args.eval_limit},
        "train": {"epochs": args.epochs, "batch_size": 128, "lr": 0.05, "seed": args.seed, "augment": False},
        "resources": {"replica": {"cpus": 1}, "student": {"cpus": 1}, "teacher": {"cpus": 0.5}, "teacher_actors": 2},
        "storage": str(out / "runs"),
    }
    v1_data = {**common["data"], "subset": "half-samples"}  # the old version saw half of the images
    return [
        {**common, "version": "v1", "arch": "mlp-small", "data": v1_data, "method": {"name": "none"}},
        {**common, "version": "v2-none", "arch": "mlp", "method": {"name": "none"}},
        {**common, "version": "v2-elodi", "arch": "mlp",
         "method": {"name": "elodi", "m": args.m, "alpha": 0.8, "k": 10, "topk_by": "teacher"}},
    ]


def comparison_rows(results: list[dict[str, Any]]) -> list[list[str]]:
    rows = []
    for result in results:
        m = result["metrics"]
        vs_old = m.get("vs_old")
        flips = [format_percent(vs_old[k]) if vs_old else "—" for k in ("nfr", "pfr", "rel_nfr")]
        rows.append([result["version"], f"v{result['registered_version']}", result["method"],
                     format_percent(m["error_rate"]), *flips])
    return rows


def run(args: argparse.Namespace) -> int:
    from orchestrator import tracking
    from orchestrator.pipeline import prepare
    from orchestrator.progress import StageWatch, make_display
    from orchestrator.report import write_report
    from orchestrator.run import connect, run_update

    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("MLFLOW_TRACKING_URI", f"sqlite:///{out / 'mlflow.db'}")
    documents = demo_specs(out, args)
    try:
        prepare(parse_spec(documents[0]))  # the data is there (make demo installs it)
    except SpecError as e:
        print(f"congruent demo: error: {e}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    connect(None)
    tracking.configure()
    watch = StageWatch(make_display(args.quiet))
    results, old = [], None
    try:
        for document in documents:
            if old is not None:
                document["old"] = old
            spec, parent = _resolved(parse_spec(document))
            print(f"\n{spec.version}: {spec.arch}, method {spec.method.name}", flush=True)
            result = run_update(spec, out / spec.version, watch, parent)
            results.append(result)
            if old is None:
                old = f"{spec.model}/{result['registered_version']}"
    except KeyboardInterrupt:
        print("congruent demo: interrupted; the current run is marked KILLED", file=sys.stderr)
        return 130
    finally:
        watch.close()
    report, data = write_report(args.model, out / "report.html")
    uri = os.environ["MLFLOW_TRACKING_URI"]
    print(f"\nDone in {time.perf_counter() - started:.0f} s. {args.model}: v1 → v2 on "
          f"{results[0]['n_eval']} regression-eval samples (fingerprint {results[0]['fingerprint']}):\n")
    print("\n".join(format_table(["version", "registry", "method", "ER", "NFR vs v1", "PFR vs v1", "Rel-NFR"],
                                 comparison_rows(results), left=3)))
    paragon = results[-1]["metrics"].get("paragon_vs_old")
    if paragon is not None:
        print(f"\nThe {args.m}-replica ensemble ELODI distilled (the paragon): ER {format_percent(paragon['er_new'])}, "
              f"NFR vs v1 {format_percent(paragon['nfr'])}.")
    print(f"\nWhere to look next:\n"
          f"  report ({data.n_flips} negative flips of v{data.latest} to explore): {report}\n"
          f"  registry: congruent versions {args.model} --matrix   (with MLFLOW_TRACKING_URI={uri})\n"
          f"  MLflow UI: mlflow ui --backend-store-uri {uri}\n"
          f"  predictions (.npy for congruent compare): {out}/v*/predictions/")
    return 0


def _resolved(spec: UpdateSpec):
    from orchestrator.run import resolve_old

    spec, parent = resolve_old(spec)
    return spec.with_absolute_paths(), parent


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("demo", help="v1 → v2 without treatment and with ELODI, on Ray, in minutes")
    parser.add_argument("--out", default="demo-output", help="where runs, the MLflow store and the report go")
    parser.add_argument("--model", default=MODEL, help=f"registered model name (default {MODEL})")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--m", type=int, default=4, help="ELODI replicas")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train-limit", type=int, default=24000, help="training samples (of 54,000)")
    parser.add_argument("--eval-limit", type=int, default=None, help="regression-eval samples (default: all)")
    parser.add_argument("--quiet", action="store_true", default=None,
                        help="print only the result (off a terminal, progress comes as plain lines, not bars)")
    parser.set_defaults(func=run)
