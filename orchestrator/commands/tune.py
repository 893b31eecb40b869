"""`congruent tune SPEC.yaml [--register-best]`: a Ray Tune search over ELODI's α and K (and λ, T,
lr), the replicas trained once and served to every trial by one teacher pool; the table, the ER–NFR
Pareto front, a scatter plot and the pick."""

from __future__ import annotations

import argparse
from typing import Any

from orchestrator.commands.options import fail, fail_all, out_option, quiet_option, ray_address
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


def outcome_lines(record: Any, registered: Any, spec: Any, run_dir: Any) -> list[str]:
    """After the table: the trials ASHA stopped, the pick (or why none), where the results are."""
    lines = []
    if record.stopped_early:
        lines.append(
            f"{len(record.stopped_early)} trial(s) stopped early by ASHA (not candidates): "
            f"{', '.join(record.stopped_early)}"
        )
    if record.pick is None:
        lines.append(
            f"no trial has val ER ≤ no-treatment val ER + {100 * spec.tune.er_tolerance:.2f} pt: nothing picked"
        )
    elif registered is not None:
        lines.append(f"the pick: {spec.model} version {registered.registered_version}")
    lines.append(f"\nresults: {run_dir}/tune.json, plot: {run_dir}/er_nfr.png")
    return lines


def run(args: argparse.Namespace) -> int:
    from orchestrator.driver.launch import Refused, execute_search, prepare

    prepared = prepare(args.spec, args.ray_address, args.out, search=True)
    if isinstance(prepared, Refused):
        return fail_all("tune", prepared.problems, prepared.code)
    try:
        record, registered = execute_search(prepared, args.quiet, args.register_best)
    except KeyboardInterrupt:
        return fail(
            "tune",
            f"interrupted: {args.spec}: trials stopped and their checkpoints deleted, the MLflow "
            "run is marked KILLED, no version was registered",
            130,
        )
    print("\n" + format_trials(record))
    print("\n".join(outcome_lines(record, registered, prepared.plan.spec, prepared.run_dir)))
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
