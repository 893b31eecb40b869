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
    check_output,
    fail,
    fail_all,
    json_option,
    out_option,
    quiet_option,
    ray_address,
    report_checks,
)
from orchestrator.views.format import percent
from workers.errors import first_line


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


def run(args: argparse.Namespace) -> int:
    from orchestrator.driver.check import checked_plan
    from orchestrator.driver.pipeline import run_pipeline
    from orchestrator.execution.cluster import connect
    from orchestrator.execution.watch import StageWatch
    from orchestrator.tracking.store import TrackingUnavailable, check_store
    from orchestrator.views.progress import make_display
    from pipelines.spec import SpecError, load_spec

    if args.check:
        return report_checks("run", [args.spec], args.ray_address, args.quiet or args.json)
    # every check before Ray starts and before the MLflow run opens: exit 2 leaves nothing behind
    try:
        spec = load_spec(args.spec)
    except SpecError as e:
        return fail_all("run", e.problems)
    # data, old model, registry, storage, what the cluster can hold (this machine's cores for an
    # embedded Ray, not started yet): every problem at once, as `congruent check` finds them
    plan, found = checked_plan(spec, args.ray_address)
    problems = [f"{args.spec}: {line}" for line in found]
    run_dir = Path(args.out) if args.out else Path("runs", spec.model, spec.version)
    try:
        check_output(run_dir, "--out" if args.out else None)
    except SpecError as e:
        problems += e.problems
    if problems or plan is None:
        return fail_all("run", problems)
    try:
        check_store()  # an unreachable MLflow fails in bounded time
    except TrackingUnavailable as e:
        return fail("run", str(e), 1)
    connect(args.ray_address, dashboard=plan.data_parallel)
    watch = StageWatch(make_display(quiet=True if args.json else args.quiet))
    watch.display.prefix = f"{spec.version} "
    try:
        result = run_pipeline(plan, run_dir, watch)
    except KeyboardInterrupt:
        watch.close()
        return fail(
            "run",
            f"interrupted: {args.spec}: stages cancelled, the MLflow run is marked KILLED, no version was registered",
            130,
        )
    except Exception as e:  # noqa: BLE001 — a stage failed: its MLflow run is FAILED and nothing was registered
        cause = getattr(e, "cause", None) or e  # a RayTaskError carries the worker's exception
        reason = first_line(cause)
        return fail(
            "run",
            f"{args.spec}: pipeline failed ({type(cause).__name__}: {reason}); the MLflow run is "
            "marked FAILED with the traceback in error.log, no version was registered",
            1,
        )
    finally:
        watch.close()
    print(json.dumps(json_result(result)) if args.json else "\n" + format_result(result))
    if result.promotion is not None:
        passed = result.promotion["passed"]
        print(
            f"{spec.model} v{result.registered_version} {'promoted to champion' if passed else 'NOT promoted'}: "
            f"{result.promotion['reason']}",
            file=sys.stdout if passed else sys.stderr,
        )
        return 0 if passed else 1
    return 0


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
