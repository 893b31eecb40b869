"""Benchmark `congruent tune`: the cost of n trials sharing one set of replicas and one teacher
pool, against n × (replicas + distillation), the cost of n independent ELODI pipelines.

    python -m benchmarks.performance.tune_cost [--m 4] [--samples 12800] [--epochs 1]

Runs, on local Ray in a temporary directory with its own MLflow store and a throw-away old model,
a real 4-trial grid search (α ∈ {0.5, 0.9} × K ∈ {3, 10}) and one plain `congruent run` of the same
ELODI spec (replicas + distillation, its own storage so nothing is reused), both as whole commands,
and writes the ratio tune / (n × run) to docs/benchmarks/performance.md, with the stage times inside the search.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from benchmarks.report import markdown_table, page, write_section

SECTION = "## Tune: trials sharing the replicas"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m", type=int, default=4)
    parser.add_argument("--samples", type=int, default=12800)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--out", default=page("performance"))
    args = parser.parse_args()
    from workers.models.checkpoints import ModelSettings, save_checkpoint

    with tempfile.TemporaryDirectory() as tmp:
        settings = ModelSettings("small-cnn", 10)
        save_checkpoint(Path(tmp, "old.pt"), settings.build(seed=99), settings)
        spec = {
            "model": "bench-tune",
            "version": "v2",
            "arch": "small-cnn",
            "old": str(Path(tmp, "old.pt")),
            "data": {"train_limit": args.samples, "eval_limit": 2000},
            "storage": str(Path(tmp, "storage")),
            "method": {"name": "elodi", "m": args.m},
            "train": {"epochs": args.epochs, "lr": 0.05},
            "resources": {
                "replica": {"cpus": 1},
                "student": {"cpus": 1},
                "teacher": {"cpus": 0.5},
                "teacher_actors": 2,
            },
            "tune": {"search": "grid", "space": {"alpha": [0.5, 0.9], "k": [3, 10]}},
        }
        Path(tmp, "spec.yaml").write_text(yaml.safe_dump(spec))
        single = {**{k: v for k, v in spec.items() if k != "tune"}, "storage": str(Path(tmp, "storage-single"))}
        Path(tmp, "single.yaml").write_text(yaml.safe_dump(single))
        env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp}/mlflow.db", "RAY_ADDRESS": ""}

        def timed(*command: str) -> float:
            started = time.perf_counter()
            subprocess.run([sys.executable, "-m", "orchestrator", *command], check=True, env=env, cwd=tmp)
            return time.perf_counter() - started

        tune_s = timed("tune", str(Path(tmp, "spec.yaml")), "--out", str(Path(tmp, "out")))
        run_s = timed("run", str(Path(tmp, "single.yaml")), "--out", str(Path(tmp, "single")))
        record = json.loads(Path(tmp, "out", "tune.json").read_text())
    n = len(record["trials"])
    trial = sum(t["seconds"] for t in record["trials"]) / n
    ratio = tune_s / (n * run_s)
    stages = (record["replicas_seconds"] + record["search_seconds"]) / (n * (record["replicas_seconds"] + trial))
    print(f"{n} trials: tune {tune_s:.0f} s; one ELODI run {run_s:.0f} s; ratio {ratio:.2f}; stages ratio {stages:.2f}")
    section = (
        f"{SECTION}\n\nCommand: `python -m benchmarks.performance.tune_cost --m {args.m} --samples {args.samples} "
        f"--epochs {args.epochs}`, {time.strftime('%Y-%m-%d')}, 2 CPU cores, one run (small-cnn, m = {args.m}, "
        f"Fashion-MNIST slice, whole commands including Ray start and MLflow).\n\n"
        + markdown_table(
            ["measure", "seconds"],
            [
                [f"`congruent tune`, {n} trials (replicas once, shared pool, search, MLflow)", f"{tune_s:.0f}"],
                ["`congruent run` of the same ELODI spec (replicas + distillation)", f"{run_s:.0f}"],
                ["n × run", f"{n * run_s:.0f}"],
                ["**tune / (n × run)**", f"**{ratio:.2f}**"],
                [
                    f"inside the search: replica stage / search of {n} trials / one trial",
                    f"{record['replicas_seconds']:.0f} / {record['search_seconds']:.0f} / {trial:.0f}",
                ],
                ["stages only: (replicas + search) / (n × (replicas + trial))", f"{stages:.2f}"],
            ],
        )
        + "\n"
    )
    write_section(Path(args.out), SECTION, section.removeprefix(SECTION))


if __name__ == "__main__":
    main()
