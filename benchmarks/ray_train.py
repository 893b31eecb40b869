"""A replica on 1 and on 2 data-parallel workers (Ray Train, DDP over gloo) on this machine's CPUs:
training samples/s and what Ray Train's start-up costs, in one run.

    python -m benchmarks.ray_train [--samples 12800] [--epochs 2] [--out docs/benchmarks.md]

N = 1 is the plain Ray task a replica is; N = 2 is `resources.replica.workers: 2` (one CPU each).
Samples/s: of the last epoch, all workers together (each trains half of every batch). Start-up: the
stage's wall time minus its training seconds.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from benchmarks.report import markdown_table, write_section
from orchestrator.execution.cluster import connect
from orchestrator.execution.stages import train_replicas
from orchestrator.execution.watch import StageWatch
from orchestrator.planning.preflight import preflight
from pipelines.spec import parse_spec

SECTION = "## Ray Train: one replica on 1 and 2 workers (CPU)"


def stage(workers: int, samples: int, epochs: int, folder: Path) -> dict:
    spec = parse_spec(
        {
            "model": "bench-train",
            "version": f"n{workers}",
            "arch": "small-cnn",
            "data": {"train_limit": samples, "eval_limit": 1000},
            "method": {"name": "ensemble", "m": 1},
            "train": {"epochs": epochs, "lr": 0.05},
            "storage": str(folder),
            "resources": {"replica": {"cpus": 1, "workers": workers}},
        }
    )
    started = time.perf_counter()
    record = train_replicas(preflight(spec), StageWatch())[0]
    wall = time.perf_counter() - started
    last = record.history[-1]
    rate = last["samples_per_second"] * workers  # each worker reports its own shard's rate
    training = sum(h["seconds"] for h in record.history)
    return {
        "workers": workers,
        "wall_s": wall,
        "training_s": training,
        "samples_per_s": rate,
        "startup_s": wall - training,
        "val_error_rate": record.val_error_rate,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=12800)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--out", default="docs/benchmarks.md")
    args = parser.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    connect(None, dashboard=True)
    with tempfile.TemporaryDirectory() as tmp:
        stage(1, 1024, 1, Path(tmp, "warm"))  # warm the worker processes and the data
        rows = [stage(n, args.samples, args.epochs, Path(tmp, f"n{n}")) for n in (1, 2)]
    for row in rows:
        print(row)
    headers = ["workers", "samples/s (last epoch)", "training s", "stage wall s", "start-up s", "val ER %"]
    table = markdown_table(
        headers,
        [
            [
                str(r["workers"]),
                f"{r['samples_per_s']:.0f}",
                f"{r['training_s']:.1f}",
                f"{r['wall_s']:.1f}",
                f"{r['startup_s']:.1f}",
                f"{100 * r['val_error_rate']:.2f}",
            ]
            for r in rows
        ],
    )
    body = (
        f"Command: `python -m benchmarks.ray_train --samples {args.samples} --epochs {args.epochs}`, "
        f"{time.strftime('%Y-%m-%d')}, 2 CPU cores, one run; small-cnn, a replica stage of one replica, "
        f"embedded local Ray.\n\n{table}\n\n"
        f"Speed-up of 2 workers: **{rows[1]['samples_per_s'] / rows[0]['samples_per_s']:.2f}×** in samples/s; "
        f"Ray Train's start-up adds {rows[1]['startup_s'] - rows[0]['startup_s']:.1f} s over a plain task. "
        "So a replica or student with `workers: 1` stays a plain Ray task; Ray Train is for models that need "
        "more than one device, where the start-up is small against the training. GPU scaling (nccl) is not "
        "measured: the GPU machine available here has no Ray."
    )
    write_section(Path(args.out), SECTION, body)


if __name__ == "__main__":
    main()
