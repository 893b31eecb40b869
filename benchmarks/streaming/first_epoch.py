"""The first streamed epoch against the steady ones on a million rows and more (issue 49, item 6).

    python -m benchmarks.streaming.first_epoch [--rows 1000000] [--shards 16] [--arch text-bag]

Parquet shards of short review-like texts (benchmarks/streaming/data_generator.py: two tweets of one class a
row) are streamed on a local Ray of the machine's cores: a text model trains two epochs, its first
reading and tokenizing every shard (the reading tasks beside the trainer) and keeping the rows
(token_cache.py), its second reading the kept rows. Reported: samples/s of each epoch, their ratio
(target: the first ≥ 0.5× the second on 2 cores), the CPU seconds the training process and the
reading processes spent in the first epoch (what bounds it), and the process's peak resident memory.
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.report import RESULTS_DIR, markdown_table, page, write_section
from benchmarks.streaming.common import machine
from benchmarks.streaming.data_generator import write_texts

HEADING = "## The first streamed epoch against the steady ones, a million rows (CPU)"
RESULTS = RESULTS_DIR / "stream-first-epoch-results.json"


def reader_cpu_seconds() -> float:
    """CPU seconds of this machine's Ray worker processes so far (the reading tasks run there), from
    /proc: user + system time of every process whose command line starts with "ray::"."""
    import os

    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if not (entry / "cmdline").read_bytes().startswith(b"ray::"):
                continue
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
        except OSError:
            continue
    return total


def measure(folder: Path, arch: str, batch_size: int) -> dict[str, float]:
    import ray

    from orchestrator.dataplane.table_streams import open_table_stream
    from workers.data.tokenizer import text_input
    from workers.models.checkpoints import ModelSettings
    from workers.training.config import TrainConfig
    from workers.training.trainer import train

    ray.init(num_cpus=torch.multiprocessing.cpu_count(), include_dashboard=False, log_to_driver=False)
    torch.set_num_threads(1)
    started = time.perf_counter()
    splits = open_table_stream(str(folder / "*.parquet"), label_column="sentiment")
    scanned = time.perf_counter() - started
    inputs = text_input(splits.train.tokenizer_texts(200_000), vocab_size=8000, max_length=64)
    settings = ModelSettings(arch, splits.train.num_classes, inputs)
    config = TrainConfig(epochs=2, batch_size=batch_size, lr=0.5)
    own_before, readers_before = time.process_time(), reader_cpu_seconds()
    epoch_cpu: list[tuple[float, float]] = []

    def on_epoch(stats: object) -> None:
        epoch_cpu.append((time.process_time(), reader_cpu_seconds()))

    result = train(settings.build(0), splits.train, config, settings=settings, on_epoch=on_epoch)
    first, second = result.history[0], result.history[1]
    (own_first, readers_first), (own_second, readers_second) = epoch_cpu
    return {
        "train_rows": len(splits.train),
        "scan_seconds": scanned,
        "first_epoch_samples_per_second": first.samples_per_second,
        "second_epoch_samples_per_second": second.samples_per_second,
        "ratio": first.samples_per_second / second.samples_per_second,
        "first_epoch_seconds": first.seconds,
        "trainer_cpu_seconds_first_epoch": own_first - own_before,
        "reader_cpu_seconds_first_epoch": readers_first - readers_before,
        "trainer_cpu_seconds_second_epoch": own_second - own_first,
        "reader_cpu_seconds_second_epoch": readers_second - readers_first,
        "peak_resident_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--arch", default="text-bag")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--out", type=Path, default=page("streaming"))
    parser.add_argument("--report", action="store_true", help=f"only rewrite the section from {RESULTS}")
    args = parser.parse_args()
    if not args.report:
        with tempfile.TemporaryDirectory(prefix="congruent-first-epoch-") as tmp:
            folder = Path(tmp)
            write_texts(folder, args.rows, args.shards)
            figures = measure(folder, args.arch, args.batch_size)
        results = {
            "date": time.strftime("%Y-%m-%d"),
            "machine": machine(),
            "torch": torch.__version__,
            "rows": args.rows,
            "shards": args.shards,
            "arch": args.arch,
            "batch_size": args.batch_size,
            **figures,
        }
        print(json.dumps(results, indent=1))
        RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    write_section(args.out, HEADING, report(json.loads(RESULTS.read_text())))


def report(r: dict) -> str:
    per = r["train_rows"] / 1e6
    row = [
        f"{r['rows']:,} ({r['train_rows']:,} train)",
        str(r["shards"]),
        r["arch"],
        f"{r['first_epoch_samples_per_second']:,.0f}",
        f"{r['second_epoch_samples_per_second']:,.0f}",
        f"**{r['ratio']:.2f}×**",
        f"{r['trainer_cpu_seconds_first_epoch'] / per:.0f} / {r['reader_cpu_seconds_first_epoch'] / per:.0f}",
        f"{r['trainer_cpu_seconds_second_epoch'] / per:.0f} / {r['reader_cpu_seconds_second_epoch'] / per:.0f}",
        f"{r['peak_resident_mib']:,.0f}",
    ]
    headers = [
        "rows",
        "shards",
        "model",
        "first epoch, samples/s",
        "second epoch, samples/s",
        "first / second",
        "first epoch CPU µs a sample: trainer / readers",
        "second epoch: trainer / readers",
        "trainer peak RSS, MiB",
    ]
    met = "met" if r["ratio"] >= 0.5 else "not met"
    return "\n".join(
        [
            f"Command: `python -m benchmarks.streaming.first_epoch --rows {r['rows']} --shards {r['shards']} "
            f"--arch {r['arch']}`, {r['date']}, {r['machine']}, torch {r['torch']}, one run; raw figures in "
            f"`{RESULTS}`. A local Ray of the machine's cores; the trainer's torch uses one thread, the "
            "reading tasks (one task reads up to 16 shards, interleaved) the rest. The preflight scan of the "
            f"shards took {r['scan_seconds']:.0f} s and is not in either epoch.",
            "",
            markdown_table(headers, [row]),
            "",
            f"Target: the first streamed epoch at ≥ 0.5× the steady ones on 2 cores: **{met}** ({r['ratio']:.2f}×).",
            "",
            "What bounds each epoch, from the CPU columns: the readers (one task reading the 16 shards "
            "interleaved, parquet and tokenizing) need "
            f"{r['reader_cpu_seconds_first_epoch'] / per:.0f} µs a sample of the second core, well under what the "
            f"trainer needs of the first ({r['trainer_cpu_seconds_first_epoch'] / per:.0f} µs), so they wait on "
            "the trainer's backpressure. The trainer's own cost is the model's step in both epochs (the second "
            "epoch's column: text-bag's SGD updates its whole embedding table each step) plus, in the first "
            "epoch only, taking the stream's blocks, shuffling them and "
            "writing the kept file "
            f"({(r['trainer_cpu_seconds_first_epoch'] - r['trainer_cpu_seconds_second_epoch']) / per:.0f} µs a "
            "sample more than the second epoch). The issue's v1 (940 samples/s, 85 s a 100,000-row shard) read "
            "each shard whole in one task, two tasks at once on 2 cores beside the trainer, and handed the "
            "trainer 64 rows at a time through Ray Data's own shuffle buffer; the rows now come 4,096 at a time "
            "and are shuffled in the trainer (`shuffled_batches`). The peak resident memory includes the "
            "kept file's pages the trainer maps (page cache the kernel may drop).",
        ]
    )


if __name__ == "__main__":
    main()
