"""`congruent run SPEC.yaml`: one update pipeline on an embedded local Ray, or on a cluster.

congruent run pipelines/examples/elodi-small.yaml               # Ray started inside the command
congruent run spec.yaml --ray-address 127.0.0.1:6379            # an existing cluster (or RAY_ADDRESS)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from orchestrator.commands.options import (
    fail,
    fail_all,
    json_option,
    out_option,
    quiet_option,
    ray_address,
    report_checks,
)
from orchestrator.views.format import percent


def format_result(result: Any) -> str:
    """The result table: the new version against the old one and the paragon."""
    from orchestrator.views.tables import table

    m = result.metrics
    rows = [
        [
            label,
            percent(r["er_old"]),
            percent(r["er_new"]),
            percent(r["nfr"]),
            percent(r["pfr"]),
            percent(r["rel_nfr"], none="undefined"),
        ]
        for label, r in (
            ("new vs old", m.get("vs_old")),
            ("new vs paragon", m.get("vs_paragon")),
            ("paragon vs old", m.get("paragon_vs_old")),
        )
        if r is not None
    ]
    lines = [
        f"{result.model} {result.version} ({result.method}, {result.arch}): ER {percent(m['error_rate'])} "
        f"on {result.n_eval} regression-eval samples (fingerprint {result.fingerprint})"
    ]
    if rows:
        lines += ["", table(["update", "ER old", "ER new", "NFR", "PFR", "Rel-NFR"], rows)]
    lines += ["", f"predictions: {Path(result.labels).parent}/  checkpoint: {result.checkpoint}"]
    if result.registered_version:
        lines += [f"registry: {result.model} version {result.registered_version} (MLflow run {result.run_id})"]
    return "\n".join(lines)


def json_result(result: Any) -> dict[str, Any]:
    """`run --json`: the metrics (error_rate, vs_old, vs_paragon, paragon_vs_old, at the top level
    as before) and which version they belong to: model, version label, registered version, run."""
    return {
        **result.metrics,
        "model": result.model,
        "version": result.version,
        "registered_version": result.registered_version,
        "run_id": result.run_id,
    }


def promotion_line(result: Any) -> tuple[str, bool]:
    """The promotion gate's verdict on the registered version, and whether it passed."""
    passed = result.promotion["passed"]
    verdict = "promoted to champion" if passed else "NOT promoted"
    return f"{result.model} v{result.registered_version} {verdict}: {result.promotion['reason']}", passed


def run(args: argparse.Namespace) -> int:
    from orchestrator.driver.launch import PipelineFailed, Refused, execute, prepare

    if args.check:
        return report_checks("run", [args.spec], args.ray_address, args.quiet or args.json)
    prepared = prepare(args.spec, args.ray_address, args.out)
    if isinstance(prepared, Refused):
        return fail_all("run", prepared.problems, prepared.code)
    try:
        result = execute(prepared, quiet=True if args.json else args.quiet)
    except KeyboardInterrupt:
        return fail(
            "run",
            f"interrupted: {args.spec}: stages cancelled, the MLflow run is marked KILLED, no version was registered",
            130,
        )
    except PipelineFailed as e:
        return fail(
            "run",
            f"{args.spec}: pipeline failed ({e}); the MLflow run is "
            "marked FAILED with the traceback in error.log, no version was registered",
            1,
        )
    print(json.dumps(json_result(result)) if args.json else "\n" + format_result(result))
    if result.promotion is None:
        return 0
    line, passed = promotion_line(result)
    print(line, file=sys.stdout if passed else sys.stderr)
    return 0 if passed else 1


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run one update pipeline from a YAML spec on Ray",
        parents=[
            ray_address(),
            out_option("where predictions and result.json go (default: runs/MODEL/VERSION)"),
            json_option("print only the result, as JSON: the metrics, model, version, registered_version, run_id"),
            quiet_option(),
        ],
    )
    parser.add_argument("spec", metavar="SPEC.yaml")
    parser.add_argument(
        "--check", action="store_true", help="only check the spec, as `congruent check` does: no Ray, no training"
    )
    parser.set_defaults(func=run)
