"""Harm and help: does `method: auto` ever ship a regression, how many flips does it save, and at what
cost in time against one plain update?

    python -m benchmarks.quality.harm [--sets election friends sotu spam] [--archs text-bag text-linear minilm]
                                      [--seeds 0 1 2] [--demos images text] [--train-limit N] [--jobs 1]
                                      [--results docs/results/harm-results.json] [--report docs/benchmarks/quality.md]

The runs: every held-out text set (benchmarks/quality/heldout_report.py SETS: the election tweets and
Friends from `make`, the State of the Union sentences and SpamAssassin's emails from `make
heldout-data`; the last read by nothing before this benchmark) × `text-bag`, `text-linear` and
`hf:all-MiniLM-L6-v2` × the seeds, each unit as benchmarks/quality/heldout.py runs one (v1 with its
defaults on half the training split, v2 `method: auto` on all of it, `old: v1`), plus the two demos'
settings (orchestrator/driver/demo.py, per seed). Each unit also runs one plain update: v2's spec with
`method: none`, trained, evaluated and registered as a user's update would be, with a checkpoint store
of its own so that neither it nor auto reuses the other's trainings; its wall time is the
denominator of auto's. Training sizes: SET_LIMITS for the small models, MINILM_LIMIT (and
MINILM_BUDGET trainings) for MiniLM at 22 samples/s on a core; `--train-limit N` sets every unit's.

Each unit runs in its own process (benchmarks/report.py run_unit_process); `--jobs` runs that many at
once (their wall times then share the cores). The results file keeps every unit by its key, so a
later command adds units (one already recorded is not run again); the section and docs/results/harm.png
are rewritten from all of them (benchmarks/quality/harm_report.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.quality.baselines_grid import MINILM, short_name
from benchmarks.quality.harm_report import HEADING, PLOT, RESULTS, plot, report, run_figures, unit_key
from benchmarks.quality.heldout import Series, plain_update, run_versions, training_count, unit_specs
from benchmarks.quality.heldout_report import SETS
from benchmarks.report import link, run_unit_process, show_section

# the training split each set's small-model units cut to (None: all of it), as its heldout section ran
SET_LIMITS: dict[str, int | None] = {"election": None, "friends": 8000, "sotu": 8000, "spam": None}
MINILM_LIMIT = 1000  # MiniLM trains at 22 samples/s on a core (baselines_grid.MINILM_WHY)
MINILM_BUDGET = 4  # no treatment, KD, FD-LM, BCWI: the ELODI pair's 4 replicas and 2 students would triple it
DEMOS = ("images", "text")


def unit_limit(heldout: str, arch: str, train_limit: int | None) -> int | None:
    """A set unit's training split: `--train-limit` where given, else MiniLM's or the set's own."""
    if train_limit is not None:
        return train_limit
    return MINILM_LIMIT if arch == MINILM else SET_LIMITS[heldout]


def auto_figures(results: list[tuple[Any, float]], out: Path) -> dict[str, Any]:
    """What a unit records of its v1, plain update and auto run (run_versions' order): v2's auto.json,
    the eval samples flips are counted on, each run's seconds."""
    (v1, _), (plain, plain_seconds), (auto, auto_seconds) = results
    record = json.loads((out / "v2" / "auto.json").read_text())
    cross_fit = record.get("cross_fit")
    return {
        "v1_error_rate": v1.metrics["error_rate"],
        "n_eval": auto.n_eval,
        "n_known": auto.metrics["vs_old"]["n"],  # auto.json's eval NFR is a fraction of these
        "chosen": record["chosen"],
        "closest": record.get("closest"),
        "candidates": record["candidates"],
        "skipped": record.get("skipped", []),
        "cross_fit": None if cross_fit is None else {k: cross_fit[k] for k in ("folds", "trainings", "seconds")},
        "auto_seconds": round(auto_seconds, 1),
        "plain_seconds": round(plain_seconds, 1),
        "plain": {"error_rate": plain.metrics["error_rate"], "nfr": plain.metrics["vs_old"]["nfr"]},
    }


def run_set_unit(heldout: str, arch: str, seed: int, train_limit: int | None, out: Path) -> dict[str, Any]:
    """v1, the plain update, then v2 with auto, on a held-out set, in this process."""
    budget = MINILM_BUDGET if arch == MINILM else None
    v1, v2 = unit_specs(arch, seed, out, Series(heldout, train_limit, budget))
    started = time.perf_counter()
    results = run_versions([v1, plain_update(v2, out), v2], out)
    n = training_count(train_limit, heldout)
    return {
        "kind": "set",
        "set": heldout,
        "arch": short_name(arch),
        "seed": seed,
        "train_limit": train_limit,
        "budget": budget,
        "train_samples": n,
        "old_train_samples": n // 2,
        "seconds": round(time.perf_counter() - started, 1),
        **auto_figures(results, out),
    }


def run_demo_unit(which: str, seed: int, out: Path) -> dict[str, Any]:
    """The demo's v1 and v2 (orchestrator/driver/demo.py, its settings for `seed`) with the plain
    update between them, in this process; the demo's own verdict on v2."""
    from orchestrator.driver.demo import demo_settings, demo_specs, verdict

    settings = demo_settings(out, which == "text", seed=seed)
    v1, v2 = demo_specs(settings)
    started = time.perf_counter()
    results = run_versions([v1, plain_update(v2, out), v2], out)
    judged = verdict(results[-1][0])
    return {
        "kind": "demo",
        "set": f"demo-{which}",
        "arch": v2["arch"],
        "seed": seed,
        "train_limit": settings.train_limit,
        "budget": None,
        "seconds": round(time.perf_counter() - started, 1),
        "promise": [[words, kept] for words, kept in judged.checks()],
        **auto_figures(results, out),
    }


def machine() -> str:
    """The cores (and the GPU, where one is) the units ran on."""
    import torch

    gpu = f", {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else ", no GPU"
    return f"{os.cpu_count()} CPU cores{gpu}"


def todo(args: argparse.Namespace, done: dict[str, Any]) -> list[tuple[str, ...]]:
    """The units to run, as `--unit` arguments (those already in the results left out)."""
    units: list[tuple[str, ...]] = []
    for heldout in args.sets:
        for arch in args.archs:
            limit = unit_limit(heldout, arch, args.train_limit)
            units += [("set", heldout, arch, str(s), str(limit)) for s in args.seeds]
    units += [("demo", which, "", str(s), "") for which in args.demos for s in args.seeds]
    return [u for u in units if unit_key(*_key_parts(u)) not in done]


def _key_parts(unit: tuple[str, ...]) -> tuple[str, str, int, int | None]:
    kind, name, arch, seed, limit = unit
    set_name = name if kind == "set" else f"demo-{name}"
    return set_name, short_name(arch) if arch else "", int(seed), None if limit in ("", "None") else int(limit)


def one_unit(unit: tuple[str, ...], work: Path) -> dict[str, Any]:
    """One unit in a process of its own (`--unit`): its record."""
    set_name, arch, seed, limit = _key_parts(unit)
    folder = work / unit_key(set_name, arch, seed, limit).replace("/", "-").replace(":", "-")
    argv = [sys.executable, "-m", "benchmarks.quality.harm", "--unit", *unit, str(folder)]
    return run_unit_process(argv, f"{set_name} {arch} seed {seed}".replace("  ", " "))


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", nargs="*", choices=sorted(SETS), default=list(SETS))
    parser.add_argument("--archs", nargs="*", default=["text-bag", "text-linear", "minilm"], help=f"minilm: {MINILM}")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--demos", nargs="*", choices=[*DEMOS, "none"], default=list(DEMOS))
    parser.add_argument("--train-limit", type=int, default=None, help="every unit's training split (default: per set)")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--report", default=None, help="write the section into this markdown file")
    parser.add_argument("--unit", nargs=6, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.archs = [MINILM if a == "minilm" else a for a in args.archs]
    args.demos = [d for d in args.demos if d != "none"]
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    if args.unit:  # one unit, in its own process
        kind, name, arch, seed, limit, out = args.unit
        limit_n = None if limit in ("", "None") else int(limit)
        unit = (
            run_set_unit(name, arch, int(seed), limit_n, Path(out))
            if kind == "set"
            else run_demo_unit(name, int(seed), Path(out))
        )
        print(json.dumps(unit))
        return
    from workers.data import text_tables

    missing = [s for s in args.sets if not getattr(text_tables, SETS[s].csv).exists()]
    if missing:
        raise SystemExit(f"no {', '.join(missing)} set here: `make heldout-data` installs it")
    results = json.loads(args.results.read_text()) if args.results.exists() else {"units": {}}
    units = todo(args, results["units"])
    if units:  # a call that only rewrites the report keeps the last run's date, machine and jobs
        results.update(date=time.strftime("%Y-%m-%d"), machine=machine(), jobs=args.jobs)
    work = Path(tempfile.mkdtemp(prefix="harm-"))
    args.results.parent.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        for record in pool.map(lambda u: one_unit(u, work), units):
            record["date"] = time.strftime("%Y-%m-%d")
            results["units"][unit_key(record["set"], record["arch"], record["seed"], record["train_limit"])] = record
            args.results.write_text(json.dumps(results, indent=2))
            f = run_figures(record)
            print(
                f"{record['set']} {record['arch']} seed {record['seed']}: {record['chosen']} "
                f"{f.ratio:.2f}× {100 * f.er_change:+.2f} pt{' HARM' if f.harm else ''}, auto {f.auto_seconds:.0f} s, "
                f"plain {f.plain_seconds:.0f} s",
                flush=True,
            )
    args.results.write_text(json.dumps(results, indent=2))
    shutil.rmtree(work, ignore_errors=True)  # the units' checkpoints and stores (a failed unit's stay, to read)
    figure = args.results.parent / PLOT.name
    if results["units"]:
        plot(results, figure)
    page_link = link(figure, Path(args.report)) if args.report else f"../results/{PLOT.name}"
    show_section(report(results, page_link), args.report, HEADING)


if __name__ == "__main__":
    main()
