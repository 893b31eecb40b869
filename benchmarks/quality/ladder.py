"""Ladders: one method at several strengths under `method: auto`, every rung trained and tested, so
what each would have been proven on is shown (docs/guide/auto.md, "Ladders").

    python -m benchmarks.quality.ladder --set election --arch text-bag --seed 0 \\
        --candidates proximal_0.0001 proximal_0.0003 proximal_0.001 kd_0.1 kd_0.3
    python -m benchmarks.quality.ladder --set tweets --arch text-linear --seed 0 --train-limit 16000 \\
        --candidates proximal_0.0001 proximal_0.0003 proximal_0.001

A unit is v1 (defaults, half the training split) and v2 `method: auto` with the rungs as its
candidates, `train_untested: true` (a rung after one that fails is still trained and tested) and
`cross_fit: 3` (every rung cross-fitted: the bound that decides is the one on val and the folds
together, whatever the futility stop would skip), on a held-out set as benchmarks/quality/heldout.py
runs one, or the same on the demo's tweets (`--set tweets`, the tweet-sentiment corpus).
Each rung's val and eval figures (auto.json's candidate records) are kept by unit in the results
file (docs/results/ladder-results.json) and printed as a table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.quality.heldout import Series, run_versions, training_count, unit_specs
from benchmarks.quality.heldout_report import SETS
from benchmarks.report import ROOT, markdown_table

RESULTS = ROOT / "docs" / "results" / "ladder-results.json"
TWEETS = "tweets"  # the demo's corpus (tweet-sentiment), not a held-out set
FOLDS = 3  # auto's default J: every rung cross-fitted
KEPT: tuple[str, ...] = ("name", "tested", "eligible", "evidence", "failed", "error_rate", "nfr")
KEPT += ("val_er_change", "val_er_upper", "val_nfr_change", "val_nfr_upper")


def ladder_method(candidates: list[str]) -> dict[str, Any]:
    """v2's method: auto over the rungs, each trained, tested and cross-fitted."""
    return {"name": "auto", "candidates": candidates, "train_untested": True, "cross_fit": FOLDS}


def unit_documents(which: str, arch: str, seed: int, train_limit: int | None, out: Path) -> list[dict[str, Any]]:
    """v1 and v2 of the unit (v2's `old` is filled in once v1 is registered): a held-out set's, as
    benchmarks/quality/heldout.py writes them, or the same on the demo's tweets (`tweets`: the
    tweet-sentiment corpus, v1 on half of v2's `train_limit`)."""
    if which != TWEETS:
        return unit_specs(arch, seed, out, Series(which, train_limit))
    if train_limit is None:
        raise SystemExit("--set tweets asks for --train-limit (v2's training samples; v1 trains on half)")
    v1, v2 = unit_specs(arch, seed, out, Series())  # the held-out units' settings, on another corpus
    tweets = {"dataset": "tweet-sentiment"}
    return [
        {**v1, "data": {**tweets, "train_limit": train_limit // 2}},
        {**v2, "data": {**tweets, "train_limit": train_limit}},
    ]


def run_unit(which: str, arch: str, seed: int, train_limit: int | None, candidates: list[str]) -> dict[str, Any]:
    """The unit's v1 and v2 in this process; what auto.json recorded of each rung."""
    with tempfile.TemporaryDirectory(prefix="ladder-") as folder:
        out = Path(folder)
        v1, v2 = unit_documents(which, arch, seed, train_limit, out)
        results = run_versions([v1, {**v2, "method": ladder_method(candidates)}], out)
        record = json.loads((out / v2["version"] / "auto.json").read_text())
    cross_fit = record.get("cross_fit") or {}
    return {
        "set": which,
        "arch": arch,
        "seed": seed,
        "train_limit": train_limit,
        "train_samples": None if which == TWEETS else training_count(train_limit, which),
        "n_eval": results[-1][0].n_eval,
        "chosen": record["chosen"],
        "cross_fit": {k: cross_fit.get(k) for k in ("folds", "trainings")},
        "rungs": [{k: c.get(k) for k in KEPT} for c in record["candidates"]],
    }


def points(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:+.2f}"


def outcome(rung: dict[str, Any]) -> str:
    """What auto made of a rung that failed nothing: the reference, proven, or not tested (a rung
    before it failed: trained for its figures only)."""
    if rung["name"] == "none":
        return "the reference"
    return "proven" if rung["eligible"] else ("not tested: a weaker rung failed" if not rung["tested"] else "")


def table(unit: dict[str, Any]) -> str:
    """Each rung's val change and bound (ER, NFR), its eval ER and NFR, and why it failed."""
    header = ["rung", "val ER change (bound)", "val NFR change (bound)", "eval ER", "eval NFR", "failed"]
    rows = [
        [
            rung["name"],
            f"{points(rung['val_er_change'])} ({points(rung['val_er_upper'])}) pt",
            f"{points(rung['val_nfr_change'])} ({points(rung['val_nfr_upper'])}) pt",
            f"{100 * rung['error_rate']:.2f} %",
            f"{100 * rung['nfr']:.2f} %",
            "; ".join(rung["failed"] or []) or outcome(rung),
        ]
        for rung in unit["rungs"]
    ]
    return markdown_table(header, rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", required=True, choices=[*sorted(SETS), TWEETS])
    parser.add_argument("--arch", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train-limit", type=int, default=None)
    parser.add_argument("--candidates", nargs="+", required=True, help="the rungs, weakest first (kd_0.1, ...)")
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    unit = run_unit(args.set, args.arch, args.seed, args.train_limit, args.candidates)
    kept = json.loads(args.results.read_text()) if args.results.exists() else {"units": {}}
    key = f"{args.set}/{args.arch}/{args.seed}/{args.train_limit}/{'+'.join(args.candidates)}"
    kept["units"][key] = unit | {"date": datetime.date.today().isoformat()}
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(kept, indent=1) + "\n")
    print(table(unit))


if __name__ == "__main__":
    main()
