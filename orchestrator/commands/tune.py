"""`congruent tune SPEC.yaml [--register-best]`: a Ray Tune search over ELODI's α and K (and λ, T,
lr), the replicas trained once and served to every trial by one teacher pool; the table, the ER–NFR
Pareto front, a scatter plot and the pick."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from orchestrator.commands.options import check_output, fail, fail_all, out_option, quiet_option, ray_address
from orchestrator.views.format import percent


def format_trials(record: Any) -> str:
    from orchestrator.views.tables import table

    keys = sorted({k for t in record.trials for k in t["config"]})
    rows = []
    for i, t in enumerate(record.trials):
        marks = ("pick " if i == record.pick else "") + ("front" if i in record.pareto_front else "")
        rows.append(
            [
                t["trial_id"],
                *[f"{t['config'][k]:g}" for k in keys],
                percent(t["val_error_rate"]),
                percent(t["val_nfr"]),
                percent(t["error_rate"]),
                percent(t["nfr"]),
                percent(t["rel_nfr"], none="undefined"),
                marks.strip(),
            ]
        )
    return "\n".join(
        [
            table(["trial", *keys, "val ER", "val NFR", "ER", "NFR", "Rel-NFR", ""], rows),
            "",
            "picked on the validation split (val ER, val NFR); ER, NFR and Rel-NFR are on the eval split, "
            "where the gate tests the pick",
            f"no treatment (replicas' mean) val ER {percent(record.no_treatment_val_error_rate)}, "
            f"ER {percent(record.no_treatment_error_rate)}, "
            f"paragon ER {percent(record.paragon['er_new'])} NFR {percent(record.paragon['nfr'])}",
        ]
    )


def run(args: argparse.Namespace) -> int:
    from orchestrator.driver.tune import run_search
    from orchestrator.execution.cluster import check_cluster, connect
    from orchestrator.execution.watch import StageWatch
    from orchestrator.planning.preflight import preflight
    from orchestrator.tracking.store import TrackingUnavailable, check_store
    from orchestrator.views.progress import make_display
    from pipelines.spec import SpecError, load_spec

    try:
        spec = load_spec(args.spec)
        if spec.tune is None:
            raise SpecError(f"{args.spec}: tune: the spec has no tune section (search space, search, num_samples)")
        plan = preflight(spec)
    except SpecError as e:
        spec_name = str(args.spec)
        return fail_all("tune", [p if p.startswith(spec_name) else f"{spec_name}: {p}" for p in e.problems])
    run_dir = Path(args.out) if args.out else Path("runs", spec.model, f"{spec.version}-tune")
    try:
        check_output(run_dir, "--out" if args.out else None)
    except SpecError as e:
        return fail("tune", str(e))
    try:  # the replicas, then one student per trial beside the shared pool
        check_cluster(plan.spec, args.ray_address, True, True, plan.spec.resources.teacher_actors)
    except SpecError as e:
        return fail("tune", f"{args.spec}: {e}")
    try:
        check_store()
    except TrackingUnavailable as e:
        return fail("tune", str(e), 1)
    # the trials report through Tune; their own output (a stopped trial's SIGTERM traceback) stays in Ray's logs
    connect(args.ray_address, worker_logs=False)
    watch = StageWatch(make_display(args.quiet))
    try:
        record, registered = run_search(plan, run_dir, watch, args.register_best)
    except KeyboardInterrupt:
        watch.close()
        return fail(
            "tune",
            f"interrupted: {args.spec}: trials stopped and their checkpoints deleted, the MLflow "
            "run is marked KILLED, no version was registered",
            130,
        )
    finally:
        watch.close()
    print("\n" + format_trials(record))
    if record.stopped_early:
        print(
            f"{len(record.stopped_early)} trial(s) stopped early by ASHA (not candidates): "
            f"{', '.join(record.stopped_early)}"
        )
    if record.pick is None:
        print(f"no trial has val ER ≤ no-treatment val ER + {100 * spec.tune.er_tolerance:.2f} pt: nothing picked")
    elif registered is not None:
        print(f"the pick: {spec.model} version {registered.registered_version}")
    print(f"\nresults: {run_dir}/tune.json, plot: {run_dir}/er_nfr.png")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "tune",
        help="Ray Tune search over ELODI's α and K, replicas trained once",
        parents=[ray_address(), out_option("where results go (default: runs/MODEL/VERSION-tune)"), quiet_option()],
    )
    parser.add_argument("spec", metavar="SPEC.yaml")
    parser.add_argument("--register-best", action="store_true", help="register the picked trial as a new version")
    parser.set_defaults(func=run)
