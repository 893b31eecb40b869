"""`congruent run SPEC.yaml`: one update pipeline on an embedded local Ray, or on a cluster.

    congruent run pipelines/examples/elodi.yaml                  # local Ray started here
    congruent run spec.yaml --address 127.0.0.1:6379             # an existing cluster (or RAY_ADDRESS)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from orchestrator.compare import format_percent, format_table
from pipelines.spec import SpecError, UpdateSpec, load_spec


def connect(address: str | None) -> None:
    """Join the cluster at `address` (or RAY_ADDRESS); without one, start Ray in this process."""
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    address = address or os.environ.get("RAY_ADDRESS")
    if ray.is_initialized():
        return
    if address:
        ray.init(address=address, logging_level="WARNING")
    else:
        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, logging_level="WARNING")


def run_update(spec: UpdateSpec, run_dir: Path, say=print) -> dict[str, Any]:
    """All stages, then BCWI's sweep (bcwi) and the evaluation; returns the result record."""
    from orchestrator.evaluate import bcwi_stage, evaluate_stage
    from orchestrator.pipeline import run_stages

    outputs = run_stages(spec, say)
    if spec.method.name == "bcwi":
        bcwi_stage(spec, outputs, say)
    say("stage 3/3: evaluating on the regression-eval split")
    return evaluate_stage(spec, outputs, run_dir)


def format_result(result: dict[str, Any]) -> str:
    """The result table: the new version against the old one and the paragon."""
    m = result["metrics"]
    rows = []
    for label, key in (("new vs old", "vs_old"), ("new vs paragon", "vs_paragon"), ("paragon vs old", "paragon_vs_old")):
        if key in m:
            r = m[key]
            rows.append([label, format_percent(r["er_old"]), format_percent(r["er_new"]), format_percent(r["nfr"]),
                         format_percent(r["pfr"]), format_percent(r["rel_nfr"])])
    lines = [f"{result['model']} {result['version']} ({result['method']}, {result['arch']}): "
             f"ER {format_percent(m['error_rate'])} on {result['n_eval']} regression-eval samples "
             f"(fingerprint {result['fingerprint']})"]
    if rows:
        lines += [""] + format_table(["update", "ER old", "ER new", "NFR", "PFR", "Rel-NFR"], rows, left=1)
    lines += ["", f"predictions: {Path(result['labels']).parent}/  checkpoint: {result['checkpoint']}"]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from orchestrator.pipeline import prepare

    try:
        spec = load_spec(args.spec).with_absolute_paths()
    except SpecError as e:
        print(f"congruent run: error: {e}", file=sys.stderr)
        return 2
    try:
        prepare(spec)  # data and old-model checks, before any Ray work
    except SpecError as e:
        print(f"congruent run: error: {args.spec}: {e}", file=sys.stderr)
        return 2
    run_dir = Path(args.out) if args.out else Path("runs", spec.model, spec.version)
    say = (lambda message: None) if args.json else (lambda message: print(message, flush=True))
    connect(args.address)
    try:
        result = run_update(spec, run_dir, say)
    except SpecError as e:
        print(f"congruent run: error: {args.spec}: {e}", file=sys.stderr)
        return 2
    print(json.dumps(result["metrics"]) if args.json else "\n" + format_result(result))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("run", help="run one update pipeline from a YAML spec on Ray")
    parser.add_argument("spec", metavar="SPEC.yaml")
    parser.add_argument("--address", default=None, help="Ray cluster address (default: RAY_ADDRESS, else local)")
    parser.add_argument("--out", default=None, help="where predictions and result.json go "
                        "(default: runs/MODEL/VERSION)")
    parser.add_argument("--json", action="store_true", help="print only the metrics, as JSON")
    parser.set_defaults(func=run)
