"""Error rates and flips of LoRA adapters against full fine-tuning of the installed MiniLM (issue 51):
the plain update old → new on the tweets, each way, over seeds.

    python -m benchmarks.quality.adapter_flips [--seeds 3] [--rates 0.0005 0.002]

The models are the fidelity benchmark's `hf-minilm-lora` mode's plain ones, from its planner and
cache (benchmark-output/fidelity/hf-minilm-lora): per seed, the old model fine-tuned on the first 500
training tweets and the new one on the first 1,000, scored on the same 2,000 eval tweets; fully
fine-tuned (the hf: recipe, lr `full_lr`) and as a LoRA adapter (rank 8, alpha 16, query and value)
at each of `rates` (5e-4, the LoRA paper's RoBERTa-base rate, and 2e-3, the adapter recipe's since this
benchmark chose it on val ER). Every other setting is the recipe's
(6 epochs, batch 32, warm-up and linear decay, clip 1, 128 tokens). Per way: ER_old, ER_new, NFR old →
new on eval and ER_new on val, mean ± std over seeds. Results: docs/results/adapter-flips-results.json, which
`python -m benchmarks.quality.adapter_cost --report-only` puts beside the cost of each way in one table.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import ray

from benchmarks.fidelity import trainings
from benchmarks.fidelity.execute import load_logits, run_plan, start_local_ray
from benchmarks.fidelity.investigate import prefixed
from benchmarks.fidelity.modes import MODES
from benchmarks.fidelity.results import mean_std
from benchmarks.report import RESULTS_DIR
from workers.metrics import error_rate, negative_flip_rate
from workers.tasks.resolve import cached_splits

RESULTS = RESULTS_DIR / "adapter-flips-results.json"
FULL = "full fine-tuning"


def way_name(rate: float) -> str:
    """A LoRA way's name in the results: `LoRA lr 0.0005`."""
    return f"LoRA lr {rate:g}"


def scores(old: dict[str, np.ndarray], new: dict[str, np.ndarray], labels: dict[str, np.ndarray]) -> dict[str, float]:
    """One seed's plain update: ER_old, ER_new and NFR old → new on eval; ER_old and ER_new on val (the
    split a rate is chosen on)."""
    return {
        "er_old": error_rate(old["eval"], labels["eval"]),
        "er_new": error_rate(new["eval"], labels["eval"]),
        "nfr": negative_flip_rate(old["eval"], new["eval"], labels["eval"]),
        "val_er_old": error_rate(old["val"], labels["val"]),
        "val_er_new": error_rate(new["val"], labels["val"]),
    }


def summary(per_seed: list[dict[str, float]]) -> dict[str, Any]:
    """Mean ± std over seeds of each score, and the seeds' own."""
    return {key: mean_std([s[key] for s in per_seed]) for key in per_seed[0]} | {"per_seed": per_seed}


def lora_plain(plan: trainings.Planner, rate: float, seed: int, version: str) -> str:
    """The plain `version` model as a LoRA adapter at `rate`: the mode's own plain model at its rate,
    else one named for the rate (same seed and data) added to `plan`."""
    if rate == plan.mode.lr:
        return trainings.plain(plan, seed, version)
    other = trainings.Planner(dataclasses.replace(plan.mode, lr=rate), plan.folder)
    name = other.add(f"s{seed}/{version}/replica-1-lr{rate:g}", version, trainings.seed_of(seed, version, 1))
    plan.jobs[name] = other.jobs[name]
    return name


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rates", type=float, nargs="+", default=[5e-4, 2e-3], help="the LoRA ways' rates")
    parser.add_argument("--work", default="benchmark-output/fidelity")
    parser.add_argument("--cpus", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args(argv)
    mode = MODES["hf-minilm-lora"]
    plan = trainings.Planner(mode, (Path(args.work) / mode.name).resolve())
    pairs: dict[str, list[tuple[str, str]]] = {way: [] for way in (FULL, *map(way_name, args.rates))}
    for seed in range(args.seeds):  # a seed's every way before the next seed's
        pairs[FULL].append((trainings.fully_tuned(plan, seed, "old"), trainings.fully_tuned(plan, seed, "new")))
        for rate in args.rates:
            pairs[way_name(rate)].append((lora_plain(plan, rate, seed, "old"), lora_plain(plan, rate, seed, "new")))
    data = cached_splits(plan.data("new"))
    labels = {split: getattr(data, split).labels.numpy() for split in ("eval", "val")}
    started = time.perf_counter()
    start_local_ray(args.cpus)
    try:
        records = run_plan(plan, prefixed("adapter flips"))  # two at a time on two cores
    finally:
        ray.shutdown()
    logits = {split: load_logits(plan, split) for split in ("eval", "val")}
    of = lambda name: {split: logits[split][name] for split in logits}  # noqa: E731
    ways = {}
    for way, seeds in pairs.items():
        per_seed = [scores(of(old), of(new), labels) for old, new in seeds]
        ways[way] = summary(per_seed) | {"train_s": [records[n].get("seconds") for pair in seeds for n in pair]}
    rates = " ".join(f"{rate:g}" for rate in args.rates)
    results = {
        "command": f"python -m benchmarks.quality.adapter_flips --seeds {args.seeds} --rates {rates}",
        "date": time.strftime("%Y-%m-%d"),
        "wall_s": time.perf_counter() - started,
        "mode": dataclasses.asdict(mode),
        "n_eval": len(data.eval),
        "n_val": len(data.val),
        "seeds": args.seeds,
        "rates": args.rates,
        "ways": ways,
    }
    RESULTS.write_text(json.dumps(results, indent=1, default=float) + "\n")
    for way, v in ways.items():
        print(f"{way}: ER_new {100 * v['er_new'][0]:.2f} %, NFR {100 * v['nfr'][0]:.2f} %", flush=True)
    print(f"wrote {RESULTS}; the table: python -m benchmarks.quality.adapter_cost --report-only")
    return results


if __name__ == "__main__":
    main()
