"""Benchmark `congruent tune`: the cost of n trials sharing one set of replicas and one teacher
pool, against n × (replicas + distillation), the cost of n independent ELODI pipelines.

    python -m benchmarks.tune_cost [--m 4] [--samples 12800] [--epochs 1]

Runs a real 4-trial grid search (α ∈ {0.5, 0.9} × K ∈ {3, 10}) on local Ray, in a temporary
directory with its own MLflow store and a throw-away old model, and writes the ratio to
docs/benchmarks.md. The n × (…) side uses this run's own replica-stage wall time and mean trial time.
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

from benchmarks.report import write_section

SECTION = "## Tune: trials sharing the replicas"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m", type=int, default=4)
    parser.add_argument("--samples", type=int, default=12800)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--out", default="docs/benchmarks.md")
    args = parser.parse_args()
    from workers.checkpoints import ModelSettings, save_checkpoint

    with tempfile.TemporaryDirectory() as tmp:
        settings = ModelSettings("small-cnn", 10)
        save_checkpoint(Path(tmp, "old.pt"), settings.build(seed=99), settings)
        spec = {
            "model": "bench-tune", "version": "v2", "arch": "small-cnn", "old": str(Path(tmp, "old.pt")),
            "data": {"train_limit": args.samples, "eval_limit": 2000}, "storage": str(Path(tmp, "storage")),
            "method": {"name": "elodi", "m": args.m}, "train": {"epochs": args.epochs, "lr": 0.05},
            "resources": {"replica": {"cpus": 1}, "student": {"cpus": 1}, "teacher": {"cpus": 0.5},
                          "teacher_actors": 2},
            "tune": {"search": "grid", "space": {"alpha": [0.5, 0.9], "k": [3, 10]}},
        }
        Path(tmp, "spec.yaml").write_text(yaml.safe_dump(spec))
        env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp}/mlflow.db", "RAY_ADDRESS": ""}
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "orchestrator", "tune", str(Path(tmp, "spec.yaml")), "--out",
                        str(Path(tmp, "out"))], check=True, env=env, cwd=tmp)
        total = time.perf_counter() - started
        record = json.loads(Path(tmp, "out", "tune.json").read_text())
    n = len(record["trials"])
    trial = sum(t["seconds"] for t in record["trials"]) / n
    independent = n * (record["replicas_seconds"] + trial)
    ratio = total / independent
    print(f"{n} trials: {total:.0f} s in all; replicas {record['replicas_seconds']:.0f} s, a trial {trial:.0f} s; "
          f"n × (replicas + distillation) = {independent:.0f} s; ratio {ratio:.2f}")
    section = (f"{SECTION}\n\nCommand: `python -m benchmarks.tune_cost --m {args.m} --samples {args.samples} "
               f"--epochs {args.epochs}`, {time.strftime('%Y-%m-%d')}, 2 CPU cores, one run (small-cnn, "
               f"Fashion-MNIST slice).\n\n| measure | seconds |\n|---|---|\n"
               f"| `congruent tune`, {n} trials, whole command (Ray start, replicas, pool, search, MLflow) | {total:.0f} |\n"
               f"| replica stage ({args.m} replicas) | {record['replicas_seconds']:.0f} |\n"
               f"| one trial (distillation inside the trial) | {trial:.0f} |\n"
               f"| n × (replicas + distillation) | {independent:.0f} |\n"
               f"| **ratio** | **{ratio:.2f}** |\n")
    write_section(Path(args.out), SECTION, section.removeprefix(SECTION))


if __name__ == "__main__":
    main()
