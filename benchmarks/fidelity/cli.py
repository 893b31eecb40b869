"""The fidelity benchmark's command: plan, train on a local Ray, evaluate, write the section and plot.

    python -m benchmarks.fidelity            # default: ~30 min on 2 CPU cores, 3 seeds
    python -m benchmarks.fidelity --quick    # a few minutes: checks the pipeline, not the claim
    python -m benchmarks.fidelity --full     # for a GPU
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
import ray
import torch

from benchmarks.fidelity import plan as planning
from benchmarks.fidelity.execute import load_logits, run_plan
from benchmarks.fidelity.report import SECTION, scatter, section_body
from benchmarks.fidelity.results import results
from benchmarks.report import write_section
from workers.stages import cached_splits


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="ER/NFR of every update method on Fashion-MNIST")
    scale = parser.add_mutually_exclusive_group()
    scale.add_argument("--quick", action="store_const", const="quick", dest="mode", help="CI: checks the pipeline")
    scale.add_argument("--full", action="store_const", const="full", dest="mode", help="GPU scale")
    parser.set_defaults(mode="default")
    parser.add_argument("--seeds", type=int, default=None, help="number of seeds (default: the mode's)")
    parser.add_argument("--out", default="docs/benchmarks.md", help="markdown file to write the section into")
    parser.add_argument("--work", default="benchmark-output/fidelity", help="cache of trained models and logits")
    parser.add_argument("--cpus", type=int, default=os.cpu_count() or 2, help="Ray CPUs (tasks at once)")
    return parser.parse_args(argv)


def command_line(args: argparse.Namespace) -> str:
    flags = {"quick": " --quick", "full": " --full"}.get(args.mode, "")
    seeds = f" --seeds {args.seeds}" if args.seeds is not None else ""
    return f"python -m benchmarks.fidelity{flags}{seeds}"


def evaluate(layout: planning.Layout) -> dict:
    """Results on the eval and val splits (all versions share both: train_limit cuts train only)."""
    data = cached_splits(layout.plan.data("new"))
    return {split: results(layout, load_logits(layout.plan, split), getattr(data, split).labels.numpy())
            for split in ("eval", "val")}


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


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    mode = planning.MODES[args.mode]
    seeds = args.seeds or mode.seeds
    work = Path(args.work) / mode.name
    data = cached_splits(planning.Planner(mode, work).data("new"))
    layout = planning.layout(mode, seeds, work.resolve(), data.num_classes)
    print(f"fidelity ({mode.name}): {len(layout.plan.jobs)} models, {seeds} seed(s), cache {work}", flush=True)
    started = time.perf_counter()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_worker_niceness", "0")  # Ray's default 15 starves the trainings on a shared machine
    ray.init(address="local", num_cpus=args.cpus, include_dashboard=False, logging_level="ERROR",
             runtime_env={"env_vars": {"PYTHONPATH": os.environ.get("PYTHONPATH", os.getcwd())}})
    try:
        records = run_plan(layout.plan, lambda line: print(line, flush=True))
    finally:
        ray.shutdown()
    record = {
        "command": command_line(args), "mode": dataclasses.asdict(mode), "seeds": seeds, "cpus": args.cpus,
        "machine": platform.processor() or platform.machine(), "torch": torch.__version__,
        "device": "GPU" if mode.device == "cuda" else "no GPU", "date": time.strftime("%Y-%m-%d"),
        "wall_s": time.perf_counter() - started, "jobs": len(records),
        "trained": sum(not r["cached"] for r in records.values()),
        "curve_seeds": len(layout.curves), "n_eval": len(data.eval), "n_val": len(data.val),
        "bcwi_alpha": {n: r["alpha"] for n, r in records.items() if "alpha" in r},
        **evaluate(layout),
    }
    record["invocations"] = invocations(work, {key: record[key] for key in ("date", "wall_s", "trained", "jobs")})
    out = Path(args.out)
    results_path = work / "results.json"
    record["results_path"] = str(results_path)
    plot = scatter(record["eval"]["table"], out.parent / "fidelity-scatter.png",
                   f"Fashion-MNIST, {mode.arch}, {seeds} seed(s), eval split: ER vs NFR (mean ± std)")
    results_path.write_text(json.dumps(record, indent=1, default=_plain))
    write_section(out, SECTION, section_body(record, plot.name))
    for check in record["eval"]["verdicts"]:
        print(f"{check['row']}: {check['target']}: {check['value']:.2f} {check['unit']} "
              f"({'met' if check['met'] else 'missed'})")
    print(f"wrote {out}, {plot} and {results_path} in {record['wall_s'] / 60:.1f} min", file=sys.stderr)
    return record


def _plain(value):
    """JSON fallback for numpy scalars."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")
