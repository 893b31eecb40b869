"""What the streaming benchmarks share: their data (the tweets as parquet shards, Fashion-MNIST as an
ImageFolder of PNGs) and the Ray that reads it, their options (--epochs, --images, --out, --report),
the machine line of a section and a training's first and steady samples/s."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import platform
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]
import ray
import torch

from benchmarks.report import page, write_section
from workers.data.sources import load_images
from workers.data.text_tables import load_tweet_sentiment


def write_tweet_shards(folder: Path, shards: int = 8) -> None:
    tweets = load_tweet_sentiment()
    for shard in range(shards):
        rows = range(shard, len(tweets), shards)
        table = {
            "text": [tweets.texts[i] for i in rows],
            "sentiment": [tweets.classes[int(tweets.labels[i])] for i in rows],
        }
        pq.write_table(pa.table(table), folder / f"part-{shard:02d}.parquet")


@contextlib.contextmanager
def streaming_data(images: int) -> Iterator[tuple[Path, Path]]:
    """What the streaming benchmarks read, and the Ray that reads it: a Ray on this machine's cores
    (this process keeps one torch thread) and, in a temporary folder, the tweets as 8 parquet shards
    and `images` Fashion-MNIST PNGs as an ImageFolder. Ray stops and the folder goes on the way out."""
    torch.set_num_threads(1)
    ray.init(num_cpus=os.cpu_count() or 2, logging_level=logging.ERROR, include_dashboard=False)
    try:
        with tempfile.TemporaryDirectory(prefix="congruent-stream-") as tmp:
            texts, tree = Path(tmp, "tweets"), Path(tmp, "images")
            texts.mkdir()
            tree.mkdir()
            write_tweet_shards(texts)
            write_image_folder(tree, images)
            yield texts, tree
    finally:
        ray.shutdown()


def streaming_parser(
    description: str, results: Path, epochs: int, epochs_help: str = "at least 2: the first is reported apart"
) -> argparse.ArgumentParser:
    """The options the streaming benchmarks share: --epochs, --images, --out and --report."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--epochs", type=int, default=epochs, help=epochs_help)
    parser.add_argument("--images", type=int, default=12000)
    parser.add_argument("--out", type=Path, default=page("streaming"))
    parser.add_argument("--report", action="store_true", help=f"only rewrite the section from {results}")
    return parser


def rewrote_only(args: argparse.Namespace, heading: str, results: Path, report: Callable[[dict], str]) -> bool:
    """With --report: the docs section rewritten from the results file, and True."""
    if args.report:
        write_section(args.out, heading, report(json.loads(results.read_text())))
    return bool(args.report)


def machine() -> str:
    return f"{os.cpu_count()} CPU cores, {platform.processor() or platform.machine()}"


def write_image_folder(folder: Path, count: int) -> None:
    from PIL import Image

    pool, _ = load_images("fashion-mnist")
    for i in range(count):
        label = pool.classes[int(pool.labels[i])].replace("/", "-")
        (folder / label).mkdir(parents=True, exist_ok=True)
        Image.fromarray(pool.images[i, 0].numpy()).save(folder / label / f"{i:06d}.png")


def rates(result: object) -> dict[str, float]:
    """Samples/s of a training's first epoch, and of the later ones pooled (steady state: a streamed
    source's first epoch also starts its Ray Data reader processes and, for text, tokenizes; its
    later epochs read the kept first epoch)."""
    history = result.history  # type: ignore[attr-defined]
    later = history[1:]
    steady = sum(h.samples_per_second * h.seconds for h in later) / sum(h.seconds for h in later)
    return {"first_epoch_samples_per_second": history[0].samples_per_second, "samples_per_second": steady}
