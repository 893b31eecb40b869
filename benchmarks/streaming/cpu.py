"""Where the CPU of a streamed text training goes (issue 33): a plain text-linear trained on the
tweets as 8 parquet shards, and each process's CPU time over the steady epochs, from /proc.

    python -m benchmarks.streaming.cpu [--epochs 3]

Prints, per process that used CPU, its CPU seconds and µs per sample, and the wall time and the
share of the cores busy: whether the readers and the trainer overlap, and what each costs a sample.
Also the stream read alone (no training), samples/s: its first epoch from the shards, the later ones
from the rows it kept (token_cache.py). The measured training opens the source anew, so its first
epoch reads the shards (the reader processes already started) and the later ones the kept rows.
docs/benchmarks/streaming.md "Streamed text" cites it.
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time
from pathlib import Path

import ray
import torch

from benchmarks.streaming.common import write_tweet_shards
from orchestrator.dataplane.table_streams import TableSplit, open_table_stream
from workers.data.tokenizer import text_input
from workers.models.checkpoints import ModelSettings
from workers.training.config import TrainConfig
from workers.training.trainer import train


def cpu_seconds() -> dict[int, tuple[str, float]]:
    """{pid: (command line, user + system CPU seconds)} of every process this user can read."""
    tick = os.sysconf("SC_CLK_TCK")
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            command = Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ").strip()[:60]
        except OSError:
            continue
        found[int(pid)] = (command, (int(fields[11]) + int(fields[12])) / tick)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    ray.init(num_cpus=os.cpu_count() or 2, logging_level=logging.ERROR, include_dashboard=False)
    with tempfile.TemporaryDirectory(prefix="congruent-stream-cpu-") as tmp:
        write_tweet_shards(Path(tmp))
        splits = open_table_stream(str(Path(tmp) / "*.parquet"), label_column="sentiment")
        assert isinstance(splits.train, TableSplit)
        inputs = text_input(splits.train.tokenizer_texts(200_000), vocab_size=8000, max_length=128)
        for epoch in range(3):
            started, n = time.perf_counter(), 0
            for batch in splits.train.epoch(64, 0, epoch, inputs):
                n += len(batch)
            print(f"stream read alone, epoch {epoch + 1}: {n / (time.perf_counter() - started):,.0f} samples/s")
        settings = ModelSettings("text-linear", 3, inputs)
        config = TrainConfig(epochs=1, batch_size=64, lr=4.0, weight_decay=1e-5)
        train(settings.build(0), splits.train, config, settings=settings)  # starts the reader processes
        fresh = open_table_stream(str(Path(tmp) / "*.parquet"), label_column="sentiment").train  # nothing kept
        before, started = cpu_seconds(), time.perf_counter()
        config = TrainConfig(epochs=args.epochs, batch_size=64, lr=4.0, weight_decay=1e-5)
        train(settings.build(0), fresh, config, settings=settings)
        after, wall = cpu_seconds(), time.perf_counter() - started
    samples = args.epochs * len(splits.train)
    used = sorted(((after[p][1] - before[p][1], p) for p in after if p in before), reverse=True)
    print(f"trained {samples:,} samples in {wall:.2f} s ({samples / wall:,.0f} samples/s)")
    for seconds, pid in used[:6]:
        mine = " (this process: the training)" if pid == os.getpid() else ""
        print(f"  {seconds:5.2f} CPU-s  {1e6 * seconds / samples:5.1f} µs/sample  {after[pid][0]}{mine}")
    total = sum(seconds for seconds, _ in used)
    print(f"cores busy: {100 * total / (wall * (os.cpu_count() or 1)):.0f} %")
    ray.shutdown()


if __name__ == "__main__":
    main()
