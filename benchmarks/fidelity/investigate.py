"""Why ELODI lands where it does: variants of ELODI (both ends) scored on the val split only.

    python -m benchmarks.fidelity.investigate [--quick | --mode MODE] [--seeds 1] [--out docs/benchmarks/fidelity.md]

Each variant changes one setting of the mode (default: `default`; α, the students' epochs, K, m, K chosen by the
student's logits instead of the teacher ensemble's, text: unlabelled texts the students also distil on, the
training texts after their slice) and retrains only the two ELODI students of each
seed; the replicas and plain models come from the benchmark's cache (same settings digest). Numbers
are on the val split, never the eval split, so nothing here tunes the benchmark to its test set. Per
variant: ER_new, NFR w.r.t. the old ELODI model, NFR as a multiple of no treatment's and of the
paragon's (same split, same seeds), the new student's disagreement with its own teacher ensemble
(how tight the distillation is), and the fraction of its steps whose gradient norm was clipped (how
large the LDI term is).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import ray

from benchmarks.fidelity import trainings
from benchmarks.fidelity.execute import load_logits, run_plan, start_local_ray
from benchmarks.fidelity.modes import MODES, Mode
from benchmarks.fidelity.results import ensemble, mean_std
from benchmarks.report import markdown_table, page, write_section
from workers.metrics import error_rate, negative_flip_rate
from workers.tasks.resolve import cached_splits

SECTION = "## Fidelity: ELODI variants on the val split"
VARIANTS: dict[str, dict[str, Any]] = {
    "as benchmarked": {},
    "α = 1 (LDI only)": {"alpha": 1.0},
    "α = 0.5": {"alpha": 0.5},
    "students 2× epochs": {"elodi_epochs": "2x"},
    "K = 3": {"k": 3},
    "K = 3 by the student's top-K": {"k": 3, "topk_by": "student"},
    "m = 8": {"m": 8},
    "gradient clip 25 (not 5)": {"elodi_clip": 25.0},
    "α = 1, students 4× epochs": {"alpha": 1.0, "elodi_epochs": "4x"},
    "students distil on 4× the texts (3× unlabelled)": {"elodi_inputs": 4},
    "α = 1, students distil on 4× the texts (3× unlabelled)": {"alpha": 1.0, "elodi_inputs": 4},
}


def prefixed(prefix: str) -> Callable[[str], None]:
    """run_plan's progress callback: each line printed after `prefix: `."""
    return lambda line: print(f"{prefix}: {line}", flush=True)


FD_VARIANTS = {"fd-kl": (0.9, 0.5), "fd-lm": (0.9, 0.5)}  # method: α values (0.9 is the benchmarked one)


def fd_scores(mode: Mode, folder: Path, seeds: int, labels: np.ndarray) -> dict[str, dict]:
    """FD students toward the plain old model with each α of FD_VARIANTS: val ER_new, NFR, NFR / none."""
    table = {}
    for method, alphas in FD_VARIANTS.items():
        for alpha in alphas:
            plan = trainings.Planner(dataclasses.replace(mode, fd_alpha=alpha), folder)
            pairs = [
                (
                    trainings.plain(plan, s, "old"),
                    trainings.plain(plan, s, "new"),
                    trainings.toward_old(plan, s, method),
                )
                for s in range(seeds)
            ]
            run_plan(plan, prefixed(f"{method} α={alpha}"))
            logits = load_logits(plan, "val")
            per_seed = [
                (
                    error_rate(logits[new], labels),
                    negative_flip_rate(logits[old], logits[new], labels),
                    negative_flip_rate(logits[old], logits[new], labels)
                    / negative_flip_rate(logits[old], logits[none], labels),
                )
                for old, none, new in pairs
            ]
            table[f"{method}, α = {alpha}"] = {
                key: mean_std([row[i] for row in per_seed]) for i, key in enumerate(("er_new", "nfr", "nfr_vs_none"))
            }
    return table


def fd_markdown(table: dict[str, dict]) -> str:
    rows = [
        [
            name,
            f"{100 * v['er_new'][0]:.2f} ± {100 * v['er_new'][1]:.2f}",
            f"{100 * v['nfr'][0]:.2f} ± {100 * v['nfr'][1]:.2f}",
            f"{v['nfr_vs_none'][0]:.2f}",
        ]
        for name, v in table.items()
    ]
    return markdown_table(["FD variant", "ER_new %", "NFR %", "NFR / none"], rows)


def variant_mode(mode: Mode, change: dict[str, Any]) -> Mode:
    """The mode with one variant's settings; `elodi_epochs` "Nx" is N times the mode's `epochs`."""
    settings = {k: v for k, v in change.items() if k not in ("k", "elodi_epochs")}
    if "elodi_epochs" in change:
        settings["elodi_epochs"] = int(change["elodi_epochs"].removesuffix("x")) * mode.epochs
    return dataclasses.replace(mode, **settings)


def disagreement(a: np.ndarray, b: np.ndarray) -> float:
    """(1/N) Σ 1[argmax a ≠ argmax b]."""
    return float(np.mean(np.argmax(a, axis=1) != np.argmax(b, axis=1)))


def variant_rows(plan: trainings.Planner, seeds: int, k: int) -> dict[int, dict[str, tuple[str, ...]]]:
    """Per seed: the plain old/new, the paragon ends, the ELODI old/new students and their teachers."""
    m, rows = plan.mode.m, {}
    for s in range(seeds):
        rows[s] = {
            "plain_old": (trainings.plain(plan, s, "old"),),
            "plain_new": (trainings.plain(plan, s, "new"),),
            "paragon_old": trainings.replicas(plan, s, "old", m),
            "paragon_new": trainings.replicas(plan, s, "new", m),
            "elodi_old": (trainings.elodi(plan, s, "old", m, k),),
            "elodi_new": (trainings.elodi(plan, s, "new", m, k),),
        }
    return rows


def score(
    rows: dict[int, dict[str, tuple[str, ...]]],
    logits: dict[str, np.ndarray],
    labels: np.ndarray,
    records: dict[str, dict],
) -> dict[str, tuple[float, float]]:
    """Mean ± std over seeds of the variant's val numbers."""
    per_seed: dict[str, list[float]] = {}
    for r in rows.values():
        get = {name: ensemble(logits, names) for name, names in r.items()}
        none = negative_flip_rate(get["plain_old"], get["plain_new"], labels)
        paragon = negative_flip_rate(get["paragon_old"], get["paragon_new"], labels)
        nfr = negative_flip_rate(get["elodi_old"], get["elodi_new"], labels)
        history = records[r["elodi_new"][0]].get("history", [])
        values = {
            "er_new": error_rate(get["elodi_new"], labels),
            "nfr": nfr,
            "nfr_vs_none": nfr / none,
            "nfr_vs_paragon": nfr / paragon,
            "teacher_gap": disagreement(get["elodi_new"], get["paragon_new"]),
            "clipped": float(np.mean([h["clipped_fraction"] for h in history])) if history else float("nan"),
            "none_er_new": error_rate(get["plain_new"], labels),
            "none_nfr": none,
            "paragon_nfr": paragon,
            "paragon_er_new": error_rate(get["paragon_new"], labels),
        }
        for key, value in values.items():
            per_seed.setdefault(key, []).append(value)
    return {key: mean_std(values) for key, values in per_seed.items()}


def findings(table: dict[str, dict]) -> str:
    """Which variants reach the issue's targets on val, and the best one by NFR (from the means)."""
    name, best = min(table.items(), key=lambda item: item[1]["nfr"][0])
    under_none = [n for n, v in table.items() if v["nfr_vs_none"][0] <= 0.6] or ["none"]
    near_paragon = [n for n, v in table.items() if v["nfr_vs_paragon"][0] <= 1.15] or ["none"]
    er_ok = [n for n, v in table.items() if v["er_new"][0] <= v["none_er_new"][0] + 0.003] or ["none"]
    return (
        f"Lowest NFR: {name} ({100 * best['nfr'][0]:.2f} %, {best['nfr_vs_none'][0]:.2f} × none, "
        f"ER {100 * (best['er_new'][0] - best['none_er_new'][0]):+.2f} pt vs none). "
        "Variants with NFR ≤ 0.6 × none: "
        f"{', '.join(under_none)}; ≤ 1.15 × paragon: {', '.join(near_paragon)}; ER ≤ none + 0.3 pt: "
        f"{', '.join(er_ok)}."
    )


def section_heading(mode: Mode) -> str:
    """SECTION for the image modes (default, quick); a section of its own for any other mode."""
    return SECTION if mode.name in ("default", "quick") else f"{SECTION} ({mode.name})"


def markdown(command: str, table: dict[str, dict], seeds: int, wall_s: float, mode: Mode, fd: dict[str, dict]) -> str:
    base, base_m = next(iter(table.values())), mode.m
    pct = lambda v: f"{100 * v[0]:.2f} ± {100 * v[1]:.2f}"  # noqa: E731
    headers = ["variant", "ER_new %", "NFR %", "NFR / none", "NFR / paragon", "new ≠ its ensemble %", "steps clipped %"]
    variants = markdown_table(
        headers,
        [
            [
                name,
                pct(v["er_new"]),
                pct(v["nfr"]),
                f"{v['nfr_vs_none'][0]:.2f}",
                f"{v['nfr_vs_paragon'][0]:.2f}",
                pct(v["teacher_gap"]),
                f"{100 * v['clipped'][0]:.0f}",
            ]
            for name, v in table.items()
        ],
    )
    return f"""Command: `{command}`, {time.strftime("%Y-%m-%d")}, {seeds} seed(s), wall time {wall_s / 60:.1f} min.
Val split only (the benchmark's eval numbers are not used to choose anything). Each variant changes
one setting of ELODI (both ends) in the `{mode.name}` mode; replicas and plain models are the benchmark's.
For reference on the same split: no treatment ER_new {pct(base["none_er_new"])} %, NFR
{pct(base["none_nfr"])} %; paragon ({base_m}×) ER_new {pct(base["paragon_er_new"])} %, NFR {pct(base["paragon_nfr"])} %
(the m = 8 row is compared with the 8× paragon).

{variants}

{findings(table)}
""" + (
        f"""
Focal Distillation toward the plain old model (the benchmark uses α = 0.9), same split and seeds:

{fd_markdown(fd)}
"""
        if fd
        else ""
    )


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description="ELODI variants on the val split")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--quick", action="store_true", help="the quick mode (as --mode quick)")
    which.add_argument("--mode", choices=sorted(MODES), help="the mode whose cache to vary (default: default)")
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--no-fd", action="store_true", help="skip the FD α variants")
    parser.add_argument("--out", default=page("fidelity"))
    parser.add_argument("--work", default="benchmark-output/fidelity")
    parser.add_argument("--cpus", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args(argv)
    mode = MODES[args.mode or ("quick" if args.quick else "default")]
    folder = (Path(args.work) / mode.name).resolve()
    data = cached_splits(trainings.Planner(mode, folder).data("new"))
    labels = data.val.labels.numpy()
    started, table = time.perf_counter(), {}
    start_local_ray(args.cpus)
    try:
        for name in args.variants:
            change = VARIANTS[name]
            plan = trainings.Planner(variant_mode(mode, change), folder)
            rows = variant_rows(plan, args.seeds, change.get("k", data.num_classes))
            records = run_plan(plan, prefixed(name))
            table[name] = score(rows, load_logits(plan, "val"), labels, records)
            print(f"{name}: {json.dumps({k: round(v[0], 4) for k, v in table[name].items()})}", flush=True)
        fd = {} if args.no_fd else fd_scores(mode, folder, args.seeds, labels)
    finally:
        ray.shutdown()
    flags = f" --mode {mode.name}" if mode.name not in ("default", "quick") else " --quick" if args.quick else ""
    flags += f" --seeds {args.seeds}" + (" --no-fd" if args.no_fd else "")
    if args.variants != list(VARIANTS):
        flags += " --variants " + " ".join(shlex.quote(name) for name in args.variants)
    command = f"python -m benchmarks.fidelity.investigate{flags}"
    wall = time.perf_counter() - started
    (folder / "investigation.json").write_text(json.dumps({"command": command, "variants": table, "fd": fd}, indent=1))
    write_section(Path(args.out), section_heading(mode), markdown(command, table, args.seeds, wall, mode, fd))
    return table


if __name__ == "__main__":
    main()
