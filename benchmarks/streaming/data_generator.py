"""Real-looking data at any size, for the streamed data plane's memory benchmark (issue 33).

    python -m benchmarks.streaming.data_generator images DIR --count 32000 [--side 128]
    python -m benchmarks.streaming.data_generator texts DIR --rows 2000000 [--shards 16]

- images: an ImageFolder of colour JPEGs (DIR/CLASS/NNNNNNN.jpg), side × side. Image i is
  Fashion-MNIST image i mod 70,000 upscaled, shifted by a few pixels and tinted, both drawn from
  i: every file differs, the labels stay learnable.
- texts: parquet shards with a `text` and a `sentiment` column; row i joins two tweets of one
  class, drawn from i.

The same arguments write the same bytes (the draws come from the index only).
"""

from __future__ import annotations

import argparse
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

JPEG_QUALITY = 90
CHUNK = 2000  # images a process writes per task


def _variant(base: np.ndarray, index: int, side: int) -> np.ndarray:
    """Fashion-MNIST's 28 × 28 grey `base` as a side × side RGB image: upscaled, shifted by up to
    side/16 pixels and tinted, the draws seeded by `index`."""
    from PIL import Image

    rng = np.random.default_rng(index)
    grey = np.asarray(Image.fromarray(base).resize((side, side), Image.Resampling.BILINEAR), dtype=np.float32)
    shift = side // 16
    dy, dx = rng.integers(-shift, shift + 1, size=2)
    grey = np.roll(grey, (int(dy), int(dx)), axis=(0, 1))
    tint = rng.uniform(0.55, 1.0, size=3).astype(np.float32)
    return np.clip(grey[..., None] * tint, 0, 255).astype(np.uint8)


def _write_images(folder: str, start: int, stop: int, side: int) -> int:
    from PIL import Image

    from workers.data.sources import load_images

    pool, _ = load_images("fashion-mnist")
    images, labels = pool.images[:, 0].numpy(), pool.labels.numpy()
    for i in range(start, stop):
        base = i % len(labels)
        label = pool.classes[int(labels[base])].replace("/", "-")
        target = Path(folder) / label / f"{i:07d}.jpg"
        Image.fromarray(_variant(images[base], i, side)).save(target, quality=JPEG_QUALITY)
    return stop - start


def write_images(folder: Path, count: int, side: int = 128, processes: int | None = None) -> None:
    """`count` JPEGs under folder/CLASS/, written by `processes` (default: every core)."""
    from workers.data.sources import FASHION_MNIST_CLASSES

    for name in FASHION_MNIST_CLASSES:
        (folder / name.replace("/", "-")).mkdir(parents=True, exist_ok=True)
    tasks = [(str(folder), s, min(count, s + CHUNK), side) for s in range(0, count, CHUNK)]
    with ProcessPoolExecutor(processes or os.cpu_count()) as pool:
        done = 0
        for written in pool.map(_write_images, *zip(*tasks)):
            done += written
            print(f"\r{done}/{count} images", end="", flush=True)
    print()


def write_texts(folder: Path, rows: int, shards: int = 16) -> None:
    """`rows` texts in `shards` parquet files; row i joins two tweets of one class, drawn from i."""
    import pyarrow as pa  # type: ignore[import-untyped]
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    from workers.data.text_tables import load_tweet_sentiment

    tweets = load_tweet_sentiment()
    labels = tweets.labels.numpy()
    by_class = [np.flatnonzero(labels == c) for c in range(len(tweets.classes))]
    folder.mkdir(parents=True, exist_ok=True)
    for shard in range(shards):
        index = np.arange(shard, rows, shards)
        rng = np.random.default_rng(shard)
        first = rng.integers(0, len(labels), size=len(index))
        texts, names = [], []
        for i, a in zip(index, first):
            same = by_class[int(labels[a])]
            b = same[(int(i) * 7919 + int(a)) % len(same)]
            texts.append(f"{tweets.texts[a]} {tweets.texts[b]}")
            names.append(tweets.classes[int(labels[a])])
        pq.write_table(pa.table({"text": texts, "sentiment": names}), folder / f"part-{shard:03d}.parquet")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    kinds = parser.add_subparsers(dest="kind", required=True)
    images = kinds.add_parser("images")
    images.add_argument("folder", type=Path)
    images.add_argument("--count", type=int, required=True)
    images.add_argument("--side", type=int, default=128)
    texts = kinds.add_parser("texts")
    texts.add_argument("folder", type=Path)
    texts.add_argument("--rows", type=int, required=True)
    texts.add_argument("--shards", type=int, default=16)
    args = parser.parse_args()
    if args.kind == "images":
        write_images(args.folder, args.count, args.side)
    else:
        write_texts(args.folder, args.rows, args.shards)


if __name__ == "__main__":
    main()
