"""The fidelity benchmark's command: plan, train, evaluate, write the section and plot.

    python -m benchmarks.fidelity            # default: ~30 min on 2 CPU cores on a local Ray, 3 seeds
    python -m benchmarks.fidelity --quick    # a few minutes: checks the pipeline, not the claim
    python -m benchmarks.fidelity --gpu      # one GPU, no Ray (torch + numpy + workers/): resnet20 at scale

The GPU mode runs every job in this process (replicas packed 8 at a time, students with their
teachers in-process, bf16) and needs no Ray, MLflow or pydantic; without matplotlib it skips the
plot (rerun with --report-only where matplotlib is, on the same --work cache, to draw it).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.fidelity import trainings
from benchmarks.fidelity.execute import load_logits, run_plan, run_plan_local, start_local_ray
from benchmarks.fidelity.modes import MODES, Mode, set_name
from benchmarks.fidelity.report import data_name, heading, kept_copy, plot_name, results_name, section_body
from benchmarks.fidelity.results import merge, results
from benchmarks.fidelity.scatter import scatter
from benchmarks.report import link, page, results_beside, write_section
from workers.tasks.resolve import cached_splits


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="ER/NFR of every update method on Fashion-MNIST")
    scale = parser.add_mutually_exclusive_group()
    scale.add_argument("--quick", action="store_const", const="quick", dest="mode", help="CI: checks the pipeline")
    scale.add_argument(
        "--gpu",
        action="store_const",
        const="gpu",
        dest="mode",
        help="one GPU, no Ray: resnet20 on full Fashion-MNIST, m = 4 and 8, 3 seeds",
    )
    scale.add_argument(
        "--text",
        action="store_const",
        const="text",
        dest="mode",
        help="tweets: text-bag (half the data) → text-cnn, 3 seeds, ~30 min on 2 CPUs (gpu-text: text-transformer)",
    )
    scale.add_argument("--mode", choices=sorted(MODES), dest="mode", help="any mode by name")
    parser.set_defaults(mode="default")
    parser.add_argument(
        "--local", action="store_true", help="run the jobs in this process, not on Ray (always for GPU modes)"
    )
    parser.add_argument(
        "--report-only", action="store_true", help="rewrite the section and plot from the cache's results.json"
    )
    parser.add_argument(
        "--deadline-s",
        type=float,
        default=None,
        help="start no new model after this many "
        "seconds (in-process runs); the tables cover the rows whose models were trained",
    )
    parser.add_argument(
        "--evaluate-only",
        action="store_true",
        help="train nothing: tables from the cache's trained models (e.g. logits brought back from a GPU machine)",
    )
    parser.add_argument("--seeds", type=int, default=None, help="number of seeds (default: the mode's)")
    parser.add_argument(
        "--first-seed", type=int, default=0, help="first seed index (seeds of one table on separate machines)"
    )
    parser.add_argument(
        "--merge",
        nargs="+",
        metavar="RESULTS_JSON",
        help="write one table from several runs' results.json (each its own seeds), training nothing",
    )
    parser.add_argument("--out", default=page("fidelity"), help="markdown file to write the section into")
    parser.add_argument("--work", default="benchmark-output/fidelity", help="cache of trained models and logits")
    parser.add_argument("--cpus", type=int, default=os.cpu_count() or 2, help="Ray CPUs (tasks at once)")
    return parser.parse_args(argv)


def command_line(args: argparse.Namespace) -> str:
    other = "" if args.mode == "default" else f" --mode {args.mode}"
    flags = {"quick": " --quick", "gpu": " --gpu", "text": " --text"}.get(args.mode, other)
    seeds = f" --seeds {args.seeds}" if args.seeds is not None else ""
    first = f" --first-seed {args.first_seed}" if args.first_seed else ""
    return f"python -m benchmarks.fidelity{flags}{seeds}{first}"


def evaluate(layout: trainings.Layout) -> dict:
    """Results on the eval and val splits (all versions share both: train_limit cuts train only),
    over the rows whose models were all trained (a deadline may have stopped the run)."""
    data = cached_splits(layout.plan.data("new"))
    logits = {split: load_logits(layout.plan, split) for split in ("eval", "val")}
    pruned = trainings.prune(layout, set(logits["eval"]) & set(logits["val"]))
    return {split: results(pruned, logits[split], getattr(data, split).labels.numpy()) for split in ("eval", "val")}


def invocations(work: Path, this: dict) -> list[dict]:
    """Every invocation on this cache, oldest first ({date, wall_s, trained, jobs}), `this` appended to
    `work/invocations.jsonl`; a cache from before the log starts it from its results.json."""
    log, earlier = work / "invocations.jsonl", []
    if log.exists():
        earlier = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    elif (work / "results.json").exists():
        last = json.loads((work / "results.json").read_text())
        earlier = [{key: last[key] for key in ("date", "wall_s", "trained", "jobs")}]
    runs = earlier + [this]
    log.write_text("".join(json.dumps(run) + "\n" for run in runs))
    return runs


def run_jobs(layout: trainings.Layout, mode: Mode, args: argparse.Namespace) -> dict:
    """Every job of the plan: in this process (GPU modes, --local), else on a local Ray."""
    say = lambda line: print(line, flush=True)  # noqa: E731
    if args.local or mode.name.startswith("gpu") or args.evaluate_only:
        return run_plan_local(layout.plan, say, 0.0 if args.evaluate_only else args.deadline_s)
    import ray

    start_local_ray(args.cpus)
    try:
        return run_plan(layout.plan, say)
    finally:
        ray.shutdown()


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    mode = MODES[args.mode]
    trains = not (args.report_only or args.evaluate_only or args.merge)
    if mode.device == "cuda" and not torch.cuda.is_available() and trains:
        raise SystemExit(f"fidelity --{mode.name}: no CUDA device here")
    seeds = args.seeds or mode.seeds
    work = Path(args.work) / mode.name
    if args.merge:
        record = merged([json.loads(Path(path).read_text()) for path in args.merge], args)
        target = results_beside(Path(args.out)) / results_name(mode.name)  # with the results of its page
        record["results_path"] = str(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(record, indent=1, default=_plain))
        return write_report(record, Path(args.out), work, mode, record["seeds"])
    if args.report_only:
        record = json.loads((work / "results.json").read_text())
        return write_report(record, Path(args.out), work, mode, seeds)
    data = cached_splits(trainings.Planner(mode, work).data("new"))
    layout = trainings.layout(mode, seeds, work.resolve(), data.num_classes, args.first_seed)
    print(f"fidelity ({mode.name}): {len(layout.plan.jobs)} models, {seeds} seed(s), cache {work}", flush=True)
    started = time.perf_counter()
    work.mkdir(parents=True, exist_ok=True)
    if torch.cuda.is_available() and mode.device == "cuda":
        (work / "device.txt").write_text(torch.cuda.get_device_name())
    records = run_jobs(layout, mode, args)
    device = (work / "device.txt").read_text() if (work / "device.txt").exists() else "no GPU"
    record = {
        "command": command_line(args),
        "mode": dataclasses.asdict(mode),
        "seeds": seeds,
        "cpus": args.cpus,
        "machine": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "device": device,
        "date": time.strftime("%Y-%m-%d"),
        "wall_s": time.perf_counter() - started,
        "jobs": len(records),
        "trained": sum(not r["cached"] for r in records.values()),
        "curve_seeds": len(layout.curves),
        "n_eval": len(data.eval),
        "n_val": len(data.val),
        "bcwi_alpha": {n: r["alpha"] for n, r in records.items() if "alpha" in r},
        **evaluate(layout),
    }
    if mode.text:  # the model a user would ship instead, on the same splits (issue 36)
        from benchmarks.quality.baselines import baseline

        record["baseline"] = baseline(
            "text",
            mode.train_sizes[2],
            mode.eval_limit,
            old_limit=mode.train_sizes[1],
            dataset=set_name(mode.dataset),
            val_fraction=mode.val_fraction,
        )
    record["invocations"] = invocations(work, {key: record[key] for key in ("date", "wall_s", "trained", "jobs")})
    record["results_path"] = str(work / "results.json")
    (work / "results.json").write_text(json.dumps(record, indent=1, default=_plain))
    return write_report(record, Path(args.out), work, mode, seeds)


def merged(records: list[dict], args: argparse.Namespace) -> dict:
    """One record from runs of one mode on disjoint seeds: their per-seed numbers as one table."""
    modes = {json.dumps(record["mode"], sort_keys=True) for record in records}
    if len(modes) > 1:
        raise SystemExit("fidelity --merge: the runs used different settings; only runs of one mode merge")
    first = records[0]
    seeds = sum(len(record["eval"]["table"][0]["per_seed"]) for record in records)
    runs = [run for record in records for run in record.get("invocations", [])]
    return {
        **first,
        "command": " + ".join(record["command"] for record in records) + " (merged: python -m benchmarks.fidelity "
        f"--mode {first['mode']['name']} --merge …)",
        "seeds": seeds,
        "device": ", ".join(dict.fromkeys(record["device"] for record in records)),
        "date": max(record["date"] for record in records),
        "wall_s": sum(record["wall_s"] for record in records),
        "jobs": sum(record["jobs"] for record in records),
        "trained": sum(record["trained"] for record in records),
        "curve_seeds": sum(record["curve_seeds"] for record in records),
        "bcwi_alpha": {name: a for record in records for name, a in record["bcwi_alpha"].items()},
        "eval": merge([record["eval"] for record in records]),
        "val": merge([record["val"] for record in records]),
        "invocations": runs,
        "merged_from": list(args.merge),
    }


def write_report(record: dict, out: Path, work: Path, mode: Mode, seeds: int) -> dict:
    """The section in `out` (docs/benchmarks/fidelity.md) and the ER–NFR scatter in the results folder
    beside its page (skipped, with a note, where matplotlib is missing: a bare GPU machine)."""
    plot_link = ""
    try:
        plot = scatter(
            record["eval"]["table"],
            results_beside(out) / plot_name(mode.name),
            f"{data_name(record['mode'])}, {seeds} seed(s), eval split: ER vs NFR (mean ± std)",
            record["eval"].get("from_old", ()),
        )
        plot_link = link(plot, out)
    except ImportError as e:
        print(
            f"no plot ({e}); draw it later: python -m benchmarks.fidelity --mode {mode.name} --report-only",
            file=sys.stderr,
        )
    write_section(out, heading(record["mode"]), section_body(record, plot_link, kept_copy(record, out)))
    for check in record["eval"]["verdicts"]:
        print(
            f"{check['row']}: {check['target']}: {check['value']:.2f} {check['unit']} "
            f"({'met' if check['met'] else 'missed'})"
        )
    print(f"wrote {out} and {record['results_path']} in {record['wall_s'] / 60:.1f} min", file=sys.stderr)
    return record


def _plain(value):
    """JSON fallback for numpy scalars."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")
