"""Does a perturbed copy of each batch for the distillation term (`train.distill_inputs`, token
dropout) make a distilling student flip less? Measured on the val split only, before any default
changes (issue 72).

    python -m benchmarks.quality.distill_inputs [--sets election tweets] [--seeds 0 1 2] [--rate 0.2]
                                                [--report docs/benchmarks/quality.md]

Per set and seed, as a user runs it (embedded local Ray, a fresh MLflow store per unit, each unit in
its own process): v1, `text-bag` with its defaults on the first half of the training split; then v2
on all of it with `method: {name: auto, candidates: [kd, fd-lm]}`, once as it is and once with
`train.distill_inputs: {perturb: token-dropout, rate: R}` (no treatment has no distillation term,
so it trains alike in both). Figures: each candidate's val ER and val NFR against v1 (auto.json;
the eval split is not read here).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.report import RESULTS_DIR, markdown_table, run_unit_process, show_section

SECTION = "## Distilling on perturbed copies (token dropout): the val split"
RESULTS = RESULTS_DIR / "distill-inputs-results.json"
RESOURCES = {"replica": {"cpus": 1}, "student": {"cpus": 1}, "teacher_actors": 0}
SETS = {"election": None, "tweets": 6000}  # set → train_limit (the tweets cut to keep a unit short)


def data_section(name: str, train_limit: int | None) -> dict[str, Any]:
    if name == "election":
        from benchmarks.quality.heldout import data_section as election

        return election(train_limit)
    return {"dataset": "tweet-sentiment", "train_limit": train_limit}


def training_count(name: str) -> int:
    from orchestrator.planning.plan import data_request
    from pipelines.spec import parse_spec
    from workers.tasks.resolve import cached_splits

    document = {"model": "d", "version": "d", "arch": "text-bag", "data": data_section(name, SETS[name])}
    return len(cached_splits(data_request(parse_spec(document))).train)


def run_unit(name: str, seed: int, rate: float, out: Path) -> dict[str, Any]:
    """v1, then v2 without and with the perturbed copies, in this process: each v2's auto candidates."""
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
    common = {"model": "perturb", "arch": "text-bag", "resources": RESOURCES, "storage": str(out / "runs")}
    v1 = {**common, "version": "v1", "data": data_section(name, training_count(name) // 2), "train": {"seed": seed}}
    old = run_pipeline(preflight(parse_spec(v1)), out / "v1", watch)
    method = {"name": "auto", "candidates": ["kd", "fd-lm"]}
    variants: dict[str, Any] = {}
    for label, train in (("off", {"seed": seed}), ("on", {"seed": seed, "distill_inputs": {"rate": rate}})):
        document = {
            **common,
            "version": f"v2-{label}",
            "data": data_section(name, SETS[name]),
            "method": method,
            "train": train,
            "old": f"perturb/{old.registered_version}",
        }
        started = time.perf_counter()
        run_pipeline(preflight(parse_spec(document)), out / label, watch)
        auto = json.loads((out / label / "auto.json").read_text())
        variants[label] = {
            "seconds": round(time.perf_counter() - started, 1),
            "candidates": {
                c["name"]: {"val_error_rate": c["val_error_rate"], "val_nfr": c["val_nfr"], "seconds": c["seconds"]}
                for c in auto["candidates"]
            },
        }
    watch.close()
    return {"set": name, "seed": seed, "rate": rate, "train_limit": SETS[name], "variants": variants}


def percent(value: float) -> str:
    return f"{100 * value:.2f} %"


def report(results: dict[str, Any]) -> str:
    rows = []
    for unit in sorted(results["units"].values(), key=lambda u: (u["set"], u["seed"])):
        off, on = unit["variants"]["off"]["candidates"], unit["variants"]["on"]["candidates"]
        row = [
            unit["set"],
            str(unit["seed"]),
            f"{percent(off['none']['val_error_rate'])}, {percent(off['none']['val_nfr'])}",
        ]
        for name in ("kd", "fd-lm"):
            row += [
                f"{percent(off[name]['val_error_rate'])}, {percent(off[name]['val_nfr'])}",
                f"{percent(on[name]['val_error_rate'])}, **{percent(on[name]['val_nfr'])}**",
                f"{on[name]['seconds'] / max(off[name]['seconds'], 1e-9):.1f}×",
            ]
        rows.append(row)
    headers = ["set", "seed", "no treatment: val ER, NFR"]
    for name in ("kd", "fd-lm"):
        headers += [f"{name}: val ER, NFR", f"{name} + copies: val ER, NFR", f"{name} cost"]
    units = list(results["units"].values())
    rate = units[0]["rate"] if units else 0
    better = sum(
        u["variants"]["on"]["candidates"][n]["val_nfr"] < u["variants"]["off"]["candidates"][n]["val_nfr"]
        for u in units
        for n in ("kd", "fd-lm")
    )
    return (
        f"Command: `python -m benchmarks.quality.distill_inputs`, {results['date']}, 2 CPU cores. "
        "v1: `text-bag` with its "
        "defaults on the first half of the training split; v2: all of it, `method: auto` over kd and fd-lm, "
        f"without and with `train.distill_inputs: {{perturb: token-dropout, rate: {rate}}}` (the distillation "
        "term also reads a copy of each batch with that share of its tokens dropped; the teachers' logits are "
        "those of the batch itself). Sets: the 2016 election tweets (all, 4,596 training tweets) and the "
        "built-in tweets cut to 6,000. Val split only (nothing here reads the eval split); cost: the "
        "candidate's seconds with the copies over without.\n\n"
        f"{markdown_table(headers, rows)}\n\n"
        f"The copies lowered the val NFR in {better} of {2 * len(units)} candidate trainings.\n"
    )


def load() -> dict[str, Any]:
    return json.loads(RESULTS.read_text()) if RESULTS.exists() else {"units": {}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", nargs="+", default=list(SETS), choices=list(SETS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--rate", type=float, default=0.2)
    parser.add_argument("--report", default=None, help="write the section into this markdown file")
    parser.add_argument("--unit", nargs=3, metavar=("SET", "SEED", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.unit:
        name, seed, out = args.unit
        print(json.dumps(run_unit(name, int(seed), args.rate, Path(out))))
        return
    results = load()
    results["date"] = time.strftime("%Y-%m-%d")
    work = Path(tempfile.mkdtemp(prefix="distill-inputs-"))
    for name in args.sets:
        for seed in args.seeds:
            if f"{name}/{seed}" in results["units"]:
                continue
            argv = [sys.executable, "-m", "benchmarks.quality.distill_inputs", "--rate", str(args.rate)]
            argv += ["--unit", name, str(seed), str(work / f"{name}-{seed}")]
            unit = run_unit_process(argv, f"{name} seed {seed}")
            results["units"][f"{name}/{seed}"] = unit
            RESULTS.write_text(json.dumps(results, indent=2))
            off, on = unit["variants"]["off"]["candidates"], unit["variants"]["on"]["candidates"]
            print(
                f"{name} seed {seed}: kd val NFR {percent(off['kd']['val_nfr'])} → {percent(on['kd']['val_nfr'])}, "
                f"fd-lm {percent(off['fd-lm']['val_nfr'])} → {percent(on['fd-lm']['val_nfr'])}",
                flush=True,
            )
    show_section(report(results), args.report, SECTION)


if __name__ == "__main__":
    main()
