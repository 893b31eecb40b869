"""A replica on 1 and on 2 data-parallel workers (Ray Train, DDP over gloo) on this machine's CPUs:
training samples/s and what Ray Train's start-up costs, in one run.

    python -m benchmarks.performance.ray_train [--samples 12800] [--epochs 2] [--out docs/benchmarks/performance.md]
    python -m benchmarks.performance.ray_train --stream [--epochs 3]   # text-linear, 8 streamed shards: streaming.md

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

from benchmarks.report import markdown_table, page, write_section
from orchestrator.execution.cluster import connect
from orchestrator.execution.stages import train_replicas
from orchestrator.execution.watch import StageWatch
from orchestrator.planning.preflight import preflight
from pipelines.spec import parse_spec

SECTION = "## Ray Train: one replica on 1 and 2 workers (CPU)"
STREAM_SECTION = "## Ray Train on a stream: one replica on 1 and 2 workers (CPU)"


def stage(workers: int, samples: int, epochs: int, folder: Path, shards: Path | None = None) -> dict:
    """One replica stage on `workers` workers: small-cnn on Fashion-MNIST, or with `shards`
    text-linear on those parquet shards, streamed."""
    document = {
        "model": "bench-train",
        "version": f"n{workers}",
        "arch": "small-cnn",
        "data": {"train_limit": samples, "eval_limit": 1000},
        "method": {"name": "ensemble", "m": 1},
        "train": {"epochs": epochs, "lr": 0.05},
        "storage": str(folder),
        "resources": {"replica": {"cpus": 1, "workers": workers}},
    }
    if shards is not None:
        document["arch"] = "text-linear"
        document["data"] = {"path": str(shards / "*.parquet"), "label_column": "sentiment", "streaming": True}
        document["train"] = {"epochs": epochs, "batch_size": 128}
        document["tokenizer"] = {"vocab_size": 8000, "max_length": 64}
    spec = parse_spec(document)
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
    parser.add_argument("--stream", action="store_true", help="the tweets as 8 streamed parquet shards")
    parser.add_argument("--out", default=None, help="default: the section's page (performance.md, streaming.md)")
    args = parser.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    connect(None, dashboard=True)
    with tempfile.TemporaryDirectory() as tmp:
        shards = None
        if args.stream:
            from benchmarks.streaming.common import write_tweet_shards

            shards = Path(tmp, "shards")
            shards.mkdir()
            write_tweet_shards(shards)
        stage(1, 1024, 1, Path(tmp, "warm"), shards)  # warm the worker processes and the data
        rows = [stage(n, args.samples, args.epochs, Path(tmp, f"n{n}"), shards) for n in (1, 2)]
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
    speedup = rows[1]["samples_per_s"] / rows[0]["samples_per_s"]
    if args.stream:
        body = (
            f"Command: `python -m benchmarks.performance.ray_train --stream --epochs {args.epochs}`, "
            f"{time.strftime('%Y-%m-%d')}, "
            "2 CPU cores, one run; text-linear on the tweets as 8 parquet shards, `data.streaming: true`, a "
            "replica stage of one replica, embedded local Ray. Each worker reads the epoch's seeded stream and "
            "trains its half of every batch of 128; the last epoch reads the rows each worker kept from its "
            f"first.\n\n{table}\n\nSpeed-up of 2 workers on a stream: **{speedup:.2f}×** in samples/s (the two "
            "workers share the 2 cores with their reading tasks and DDP's gradient all-reduce)."
        )
        write_section(Path(args.out or page("streaming")), STREAM_SECTION, body)
        return
    body = (
        f"Command: `python -m benchmarks.performance.ray_train --samples {args.samples} --epochs {args.epochs}`, "
        f"{time.strftime('%Y-%m-%d')}, 2 CPU cores, one run; small-cnn, a replica stage of one replica, "
        f"embedded local Ray.\n\n{table}\n\n"
        f"Speed-up of 2 workers: **{speedup:.2f}×** in samples/s; "
        f"Ray Train's start-up adds {rows[1]['startup_s'] - rows[0]['startup_s']:.1f} s over a plain task. "
        "So a replica or student with `workers: 1` stays a plain Ray task; Ray Train is for models that need "
        "more than one device, where the start-up is small against the training. GPU scaling (nccl) is not "
        "measured: the GPU machine available here has no Ray."
    )
    write_section(Path(args.out or page("performance")), SECTION, body)


if __name__ == "__main__":
    main()
