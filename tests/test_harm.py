"""The harm-and-help benchmark (benchmarks/quality/harm.py): each run's harm and NFR ratio against
auto's own no treatment, the runs pooled per architecture, the section from the results file alone;
and, marked `bench`, the harness end to end on its tiniest setting."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.quality.harm_report import EXPECTED, HEADING, pooled, report, run_figures, unit_key

ROOT = Path(__file__).resolve().parents[1]


def unit(arch: str, chosen: str, shipped: tuple[float, float], none: tuple[float, float] = (0.05, 0.02), **more):
    """A run on 1,000 eval samples of v1's classes: no treatment's and the shipped candidate's (ER, NFR)."""
    candidates = [{"name": "none", "error_rate": none[0], "nfr": none[1]}]
    if chosen != "none":
        candidates.append({"name": chosen, "error_rate": shipped[0], "nfr": shipped[1]})
    record = {
        "kind": "set",
        "set": "election",
        "arch": arch,
        "seed": 0,
        "train_limit": None,
        "budget": None,
        "train_samples": 4596,
        "old_train_samples": 2298,
        "n_known": 1000,
        "chosen": chosen,
        "candidates": candidates,
        "cross_fit": {"folds": 5, "trainings": 20, "seconds": 60.0},
        "auto_seconds": 300.0,
        "plain_seconds": 100.0,
    }
    return {**record, **more}


def test_a_run_harms_when_its_er_is_over_half_a_point_above_no_treatments_or_it_flips_more():
    kept = run_figures(unit("text-bag", "kd", (0.055, 0.012)))  # +0.5 pt exactly, 12 flips against 20
    assert (kept.flips, kept.none_flips, kept.ratio, kept.harm) == (12, 20, 0.6, False)
    assert kept.er_change == pytest.approx(0.005)
    assert run_figures(unit("text-bag", "kd", (0.0551, 0.012))).harm  # +0.51 pt
    assert run_figures(unit("text-bag", "bcwi", (0.04, 0.021))).harm  # 21 flips against 20, at −1 pt
    none = run_figures(unit("text-bag", "none", (0, 0)))
    assert (none.ratio, none.er_change, none.harm) == (1.0, 0.0, False)
    assert run_figures(unit("text-bag", "kd", (0.05, 0.001), none=(0.05, 0.0))).ratio == math.inf


def test_runs_pool_flips_and_wall_times_per_architecture_and_per_demo():
    demo = unit("mlp", "kd", (0.10, 0.01), none=(0.10, 0.02), kind="demo", set="demo-images", promise=[["x", True]])
    runs = [
        unit("text-linear", "kd", (0.05, 0.010)),  # 10 of 20 flips
        unit("text-linear", "fd-lm", (0.07, 0.030), auto_seconds=500.0),  # 30 of 20, +2 pt: harm
        unit("text-bag", "none", (0.05, 0.02)),
        demo,
    ]
    rows = {r.name: r for r in pooled(runs)}
    assert list(rows) == ["text-bag", "text-linear", "demo-images (mlp)"]
    linear = rows["text-linear"]
    assert (linear.runs, linear.harmed, linear.flips, linear.none_flips) == (2, 1, 40, 40)
    assert linear.ratio == 1.0 and linear.wall == pytest.approx(800 / 200)
    assert rows["demo-images (mlp)"].ratio == 0.5 and rows["text-bag"].harmed == 0


def test_the_section_is_written_from_the_results_alone_with_a_row_per_run_and_per_group():
    runs = [unit("text-bag", "kd", (0.05, 0.010)), unit("text-bag", "bcwi", (0.06, 0.010), seed=1)]
    results = {"date": "2026-12-07", "machine": "2 CPU cores, no GPU", "jobs": 1, "units": {}}
    results["units"] = {unit_key(u["set"], u["arch"], u["seed"], u["train_limit"]): u for u in runs}
    text = report(results)
    assert EXPECTED in text and "Harm in 1 of 2 runs." in text and "(../results/harm.png)" in text
    table = [line for line in text.splitlines() if line.startswith("| ")]
    assert len(table) == 2 + 3  # the pooled table (header, text-bag), the runs' (header, 2 runs)
    assert "| `text-bag` | 2 | **1** | 20 / 40 = 0.50× | ≤ 0.8×: met | 10.0 / 3.3 min = 3.00× | ≤ 4×: met |" in text
    assert "+1.00 pt | 0.50× | **yes** |" in text
    assert report({"units": {}}).endswith("No run recorded yet.\n") and EXPECTED in report({"units": {}})
    assert unit_key("demo-text", "text-bag", 2, None) == "demo-text/2"


@pytest.mark.bench
def test_the_harness_runs_a_unit_and_writes_its_results_section_and_plot(tmp_path):
    """The tiniest setting: the election tweets, text-bag, seed 0, 300 training tweets, no demo. The
    results file holds the unit (auto's record, its wall time and the plain update's), and the
    section on the page is what harm_report writes from that file (so --report rewrites it unchanged)."""
    from benchmarks.report import with_section

    results, page = tmp_path / "docs" / "results" / "harm-results.json", tmp_path / "docs" / "benchmarks" / "q.md"
    argv = [sys.executable, "-m", "benchmarks.quality.harm", "--sets", "election", "--archs", "text-bag"]
    argv += ["--seeds", "0", "--demos", "none", "--train-limit", "300", "--results", str(results)]
    done = subprocess.run(
        [*argv, "--report", str(page)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads(results.read_text())
    run = record["units"]["election/text-bag/0/300"]
    assert run["chosen"] in {c["name"] for c in run["candidates"]} and run["n_known"] == run["n_eval"] == 1346
    assert run["auto_seconds"] > run["plain_seconds"] > 0 and (run["train_samples"], run["old_train_samples"]) == (
        300,
        150,
    )
    none = next(c for c in run["candidates"] if c["name"] == "none")
    assert run["plain"]["error_rate"] == pytest.approx(none["error_rate"], abs=0.02)  # the same training, apart
    text = page.read_text()
    assert HEADING in text and "Harm in" in text and "| election | `text-bag` | 150 → 300 | 0 |" in text
    assert with_section(text, HEADING, report(record)) == text
    assert (results.parent / "harm.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    print(f"harness, one unit: auto {run['auto_seconds']} s, plain {run['plain_seconds']} s, unit {run['seconds']} s")
