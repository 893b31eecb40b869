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
from typing import TYPE_CHECKING, Any

from orchestrator.compare import format_percent, format_table
from pipelines.spec import SpecError, UpdateSpec, load_spec

if TYPE_CHECKING:
    from orchestrator.progress import StageWatch
    from orchestrator.registry import Reference


FORWARDED_ENV_PREFIXES = ("AWS_", "MLFLOW_S3_")  # what workers need for S3 storage, never logged


def worker_env(prefixes: tuple[str, ...] = FORWARDED_ENV_PREFIXES) -> dict[str, str]:
    """Environment the driver passes to its Ray workers (storage endpoint and credentials)."""
    return {k: v for k, v in os.environ.items() if k.startswith(prefixes)}


def connect(address: str | None) -> None:
    """Join the cluster at `address` (or RAY_ADDRESS); without one, start Ray in this process.
    The job's workers get the S3 settings of this environment through the runtime_env."""
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    address = address or os.environ.get("RAY_ADDRESS")
    if ray.is_initialized():
        return
    # a driver submitted as a Ray Job already gives its workers the job's runtime_env
    runtime_env = None if "RAY_JOB_CONFIG_JSON_ENV_VAR" in os.environ else {"env_vars": worker_env()}
    if address:
        ray.init(address=address, logging_level="WARNING", runtime_env=runtime_env)
    else:
        ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False, logging_level="WARNING",
                 runtime_env=runtime_env)


def run_update(
    spec: UpdateSpec, run_dir: Path, watch: StageWatch | None = None, parent: Reference | None = None
) -> dict[str, Any]:
    """One tracked pipeline: an MLflow run (FAILED if anything raises, KILLED on Ctrl-C) around the
    stages, BCWI's sweep (bcwi), the evaluation, the ledger, then — only after those are stored —
    the registry version and the promotion gate of `spec.promote`. Returns the result record."""
    import mlflow

    from orchestrator import publish, registry, tracking
    from orchestrator.evaluate import bcwi_stage, evaluate_stage
    from orchestrator.pipeline import run_stages
    from orchestrator.progress import StageWatch

    watch = watch or StageWatch()
    watch.display.prefix = f"{spec.version} "
    say = watch.say
    tracking.configure()
    mlflow.set_experiment(experiment_id=tracking.experiment_id(spec.model))  # nested runs follow it
    tracking.close_orphaned_runs(tracking.experiment_id(spec.model), spec.spec_hash)  # a killed driver's run
    with (mlflow.start_run(run_name=spec.version) as run, tracking.killed_on_interrupt(),
          tracking.traceback_on_failure()):
        tracking.log_spec(run.info.run_id, spec)
        outputs = run_stages(spec, watch)
        mlflow.set_tag("fingerprint", outputs.splits.fingerprint)
        if spec.method.name == "bcwi":
            bcwi_stage(spec, outputs, say)
        publish.log_stages(spec, outputs)
        say("stage 3/3: evaluating on the regression-eval split")
        result = evaluate_stage(spec, outputs, run_dir)
        publish.log_evaluation(spec, result, run_dir)
        result["run_id"] = run.info.run_id
        result["registered_version"] = None
        if result["checkpoint"] is not None:
            result["registered_version"] = publish.register_once(spec, result, parent, say)
        if spec.promote is not None and result["registered_version"] is not None:
            passed, why = registry.gate(spec.model, result["registered_version"], spec.promote.max_nfr,
                                        spec.promote.max_er_increase)
            if passed:
                registry.set_champion(spec.model, result["registered_version"])
            result["promotion"] = {"passed": passed, "reason": why}
            mlflow.set_tag("promotion", ("champion: " if passed else "rejected: ") + why)
    return result


def resolve_old(spec: UpdateSpec) -> tuple[UpdateSpec, Reference | None]:
    """Replace a registry reference in `old` by a local copy of that version's checkpoint."""
    from orchestrator import registry, tracking

    if spec.old is None or Path(spec.old).exists() or registry.parse_reference(spec.old) is None:
        return spec, None
    tracking.configure()
    parent = registry.resolve(spec.old)
    return spec.model_copy(update={"old": registry.checkpoint_of(parent)}), parent


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
    if result.get("registered_version"):
        lines += [f"registry: {result['model']} version {result['registered_version']} (MLflow run {result['run_id']})"]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from orchestrator import tracking
    from orchestrator.pipeline import prepare
    from orchestrator.progress import StageWatch, make_display
    from orchestrator.registry import RegistryError, check_eval_split

    try:
        spec = load_spec(args.spec)
    except SpecError as e:
        print(f"congruent run: error: {e}", file=sys.stderr)
        return 2
    try:
        spec, parent = resolve_old(spec)
        spec = spec.with_absolute_paths()
        splits, _ = prepare(spec)  # data and old-model checks, before any Ray work
        if parent is not None:
            check_eval_split(parent, splits.fingerprint)
    except (SpecError, RegistryError) as e:
        print(f"congruent run: error: {args.spec}: {e}", file=sys.stderr)
        return 2
    try:
        tracking.check_store()  # before any Ray work: an unreachable MLflow fails in bounded time
    except tracking.TrackingUnavailable as e:
        print(f"congruent run: error: {e}", file=sys.stderr)
        return 1
    run_dir = Path(args.out) if args.out else Path("runs", spec.model, spec.version)
    connect(args.address)
    watch = StageWatch(make_display(quiet=True if args.json else args.quiet))
    try:
        result = run_update(spec, run_dir, watch, parent)
    except KeyboardInterrupt:
        watch.close()
        print(f"congruent run: interrupted: {args.spec}: stages cancelled, the MLflow run is marked KILLED, "
              "no version was registered", file=sys.stderr)
        return 130
    except SpecError as e:
        print(f"congruent run: error: {args.spec}: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # a stage failed: its MLflow run is FAILED and nothing was registered
        cause = getattr(e, "cause", None) or e  # a RayTaskError carries the worker's exception
        reason = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
        print(f"congruent run: error: {args.spec}: pipeline failed ({type(cause).__name__}: {reason}); "
              "the MLflow run is marked FAILED with the traceback in error.log, no version was registered",
              file=sys.stderr)
        return 1
    finally:
        watch.close()
    print(json.dumps(result["metrics"]) if args.json else "\n" + format_result(result))
    promotion = result.get("promotion")
    if promotion is not None:
        verdict = "promoted to champion" if promotion["passed"] else "NOT promoted"
        print(f"{spec.model} v{result['registered_version']} {verdict}: {promotion['reason']}",
              file=sys.stdout if promotion["passed"] else sys.stderr)
        return 0 if promotion["passed"] else 1
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("run", help="run one update pipeline from a YAML spec on Ray")
    parser.add_argument("spec", metavar="SPEC.yaml")
    parser.add_argument("--address", default=None, help="Ray cluster address (default: RAY_ADDRESS, else local)")
    parser.add_argument("--out", default=None, help="where predictions and result.json go "
                        "(default: runs/MODEL/VERSION)")
    parser.add_argument("--json", action="store_true", help="print only the metrics, as JSON")
    parser.add_argument("--quiet", action="store_true", default=None,
                        help="print only the result (off a terminal, progress comes as plain lines, not bars)")
    parser.set_defaults(func=run)
