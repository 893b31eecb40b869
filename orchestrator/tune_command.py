"""The `congruent tune` command: run the search of orchestrator/tune.py inside an MLflow run, one
child run per trial, then the table, the Pareto front, the scatter plot and (optionally) the
registration of the picked trial."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from orchestrator.compare import format_percent, format_table
from pipelines.spec import SpecError, load_spec


def scatter_plot(record: dict[str, Any], path: Path, title: str) -> Path:
    """ER vs NFR of every trial (ELODI Fig. 1b style): the Pareto front joined, the pick circled,
    the no-treatment replicas and the ensemble paragon for reference."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    trials = record["trials"]
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    ax.scatter([100 * t["error_rate"] for t in trials], [100 * t["nfr"] for t in trials], c="tab:blue",
               label="ELODI trials")
    for t in trials:
        label = ", ".join(f"{k}={v:g}" for k, v in t["config"].items())
        ax.annotate(label, (100 * t["error_rate"], 100 * t["nfr"]), fontsize=7, xytext=(3, 3),
                    textcoords="offset points")
    front = [trials[i] for i in record["pareto_front"]]
    ax.plot([100 * t["error_rate"] for t in front], [100 * t["nfr"] for t in front], "--", c="tab:blue",
            alpha=0.6, label="Pareto front")
    ax.scatter([100 * e for e in record["replica_error_rates"]], [100 * n for n in record["replica_nfrs"]],
               marker="x", c="tab:gray", label="no treatment (replicas)")
    ax.scatter([100 * record["paragon"]["er_new"]], [100 * record["paragon"]["nfr"]], marker="*", s=150,
               c="tab:orange", label=f"ensemble paragon (m = {len(record['replicas'])})")
    if record["pick"] is not None:
        picked = trials[record["pick"]]
        ax.scatter([100 * picked["error_rate"]], [100 * picked["nfr"]], s=220, facecolors="none",
                   edgecolors="tab:red", linewidths=2, label="pick")
    ax.set_xlabel("error rate (%)")
    ax.set_ylabel("negative flip rate vs old (%)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def format_trials(record: dict[str, Any]) -> str:
    keys = sorted({k for t in record["trials"] for k in t["config"]})
    rows = []
    for i, t in enumerate(record["trials"]):
        marks = ("pick " if i == record["pick"] else "") + ("front" if i in record["pareto_front"] else "")
        rows.append([t["trial_id"], *[f"{t['config'][k]:g}" for k in keys], format_percent(t["error_rate"]),
                     format_percent(t["nfr"]), format_percent(t["rel_nfr"]), marks.strip()])
    lines = format_table(["trial", *keys, "ER", "NFR", "Rel-NFR", ""], rows, left=1)
    lines += ["", f"no treatment (replicas' mean) ER {format_percent(record['no_treatment_error_rate'])}, "
                  f"paragon ER {format_percent(record['paragon']['er_new'])} NFR {format_percent(record['paragon']['nfr'])}"]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    import mlflow
    import torch

    from orchestrator import publish, registry, tracking
    from orchestrator.evaluate import evaluate_stage
    from orchestrator.pipeline import StageOutputs, prepare
    from orchestrator.progress import StageWatch, make_display
    from orchestrator.run import connect, resolve_old
    from orchestrator.tune import trial_spec, tune_stages

    try:
        spec = load_spec(args.spec)
        if spec.tune is None:
            raise SpecError("tune: the spec has no tune section (search space, search, num_samples)")
        spec, parent = resolve_old(spec)
        spec = spec.with_absolute_paths()
        splits, _ = prepare(spec)
    except (SpecError, registry.RegistryError) as e:
        print(f"congruent tune: error: {args.spec}: {e}" if not str(e).startswith(str(args.spec)) else
              f"congruent tune: error: {e}", file=sys.stderr)
        return 2
    run_dir = Path(args.out) if args.out else Path("runs", spec.model, f"{spec.version}-tune")
    connect(args.address)
    tracking.configure()
    mlflow.set_experiment(experiment_id=tracking.experiment_id(spec.model))
    started = time.perf_counter()
    with mlflow.start_run(run_name=f"{spec.version}-tune"):
        tracking.log_spec(mlflow.active_run().info.run_id, spec)
        mlflow.set_tag("fingerprint", splits.fingerprint)
        watch = StageWatch(make_display(args.quiet))
        try:
            record = tune_stages(spec, run_dir, watch)
        finally:
            watch.close()
        record["seconds"] = time.perf_counter() - started
        for replica in record["replicas"]:
            tracking.log_stage(replica["name"], replica)
        for trial in record["trials"]:
            with mlflow.start_run(run_name=f"trial-{trial['trial_id']}", nested=True):
                mlflow.log_params(trial["config"])
                tracking.log_metrics("", {k: trial[k] for k in ("error_rate", "nfr", "pfr", "rel_nfr", "steps", "seconds")})
        run_dir.mkdir(parents=True, exist_ok=True)
        table = {k: v for k, v in record.items() if k != "paragon_logits"}
        (run_dir / "tune.json").write_text(json.dumps(table, indent=2, default=str))
        mlflow.log_artifact(str(run_dir / "tune.json"))
        mlflow.log_artifact(str(scatter_plot(record, run_dir / "er_nfr.png", f"{spec.model}: ER vs NFR per trial")))
        picked = record["trials"][record["pick"]] if record["pick"] is not None else None
        mlflow.set_tag("tune.pick", json.dumps(picked["config"]) if picked else "none")
        print("\n" + format_trials(record))
        if picked is None:
            print(f"no trial has ER ≤ no-treatment ER + {100 * spec.tune.er_tolerance:.2f} pt: nothing picked")
        elif args.register_best:
            best = trial_spec(spec, picked["config"])
            outputs = StageOutputs(splits=splits, old_checkpoint=spec.old, model_checkpoint=picked["checkpoint"],
                                   paragon_logits=torch.from_numpy(record["paragon_logits"]))
            result = evaluate_stage(best, outputs, run_dir / "best")
            publish.log_evaluation(best, result, run_dir / "best")
            publish.register_once(best, result, parent, say=lambda message: print(f"the pick: {message}"))
    print(f"\nresults: {run_dir}/tune.json, plot: {run_dir}/er_nfr.png")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("tune", help="Ray Tune search over ELODI's α and K, replicas trained once")
    parser.add_argument("spec", metavar="SPEC.yaml")
    parser.add_argument("--address", default=None, help="Ray cluster address (default: RAY_ADDRESS, else local)")
    parser.add_argument("--out", default=None, help="where results go (default: runs/MODEL/VERSION-tune)")
    parser.add_argument("--register-best", action="store_true", help="register the picked trial as a new version")
    parser.add_argument("--quiet", action="store_true", default=None,
                        help="print only the result (off a terminal, progress comes as plain lines, not bars)")
    parser.set_defaults(func=run)
