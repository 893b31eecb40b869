"""The same training on the streamed and the in-memory path: error rates over 3 seeds, on data that
fits (issue 33: "ER within noise").

    python -m benchmarks.streaming.fidelity [--epochs 4] [--images 12000] [--seeds 0 1 2]

Per seed, one model is trained twice from one initialisation and one seed: on the split held in memory
and on the same split streamed (the same samples: the split is a hash of each sample's key on both
paths, checked). The paths differ in order (a permutation of N in memory; files in a seeded order
and a local shuffle buffer on the stream) and, for images, in how each sample's augmentation is drawn
(by position in memory, by (seed, epoch, id) on the stream), so the two models differ as two seeds
do; both are scored on the same eval split, held in memory. Text: text-linear on the tweets (8
parquet shards); images: small-cnn on Fashion-MNIST PNGs with shifts and flips.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from benchmarks.report import RESULTS_DIR, markdown_table, write_section
from benchmarks.streaming.common import machine, rewrote_only, streaming_data, streaming_parser
from orchestrator.dataplane.image_streams import open_image_stream
from orchestrator.dataplane.table_streams import TableSplit, open_table_stream
from workers.data.formats.image_folder import load_image_folder
from workers.data.input_spec import InputSpec
from workers.data.keys import EVAL, TRAIN, key_ids, split_codes, text_keys
from workers.data.text_tables import load_tweet_sentiment
from workers.data.tokenizer import text_input
from workers.metrics import error_rate
from workers.models.checkpoints import ModelSettings
from workers.models.predict import predict_logits
from workers.training.config import TrainConfig
from workers.training.trainer import train

HEADING = "## Streamed against in memory: error rates over 3 seeds (CPU, data that fits)"
RESULTS = RESULTS_DIR / "stream-fidelity-results.json"


def error_rates(
    settings: ModelSettings, memory: Any, streamed: Any, held_out: Any, config: TrainConfig, seeds: list[int]
) -> list[dict[str, float]]:
    rows = []
    for seed in seeds:
        row: dict[str, float] = {"seed": seed}
        for path, data in (("in memory", memory), ("streamed", streamed)):
            model = train(settings.build(seed), data, replace(config, seed=seed), settings=settings).model
            logits = predict_logits(model, held_out, inputs=settings.inputs)
            row[path] = error_rate(logits, held_out.labels)
        print(row, flush=True)
        rows.append(row)
    return rows


def text_rates(folder: Path, epochs: int, seeds: list[int]) -> list[dict[str, float]]:
    splits = open_table_stream(str(folder / "*.parquet"), label_column="sentiment")
    assert isinstance(splits.train, TableSplit)
    tweets = load_tweet_sentiment()
    order = torch.tensor([i for shard in range(8) for i in range(shard, len(tweets), 8)])  # the shards' rows
    codes = torch.from_numpy(split_codes(key_ids(text_keys([tweets.texts[int(i)] for i in order])), 0.1, 0.2))
    memory, held_out = tweets.take(order[codes == TRAIN]), tweets.take(order[codes == EVAL])
    assert sorted(memory.labels.tolist()) == sorted(splits.train.labels.tolist()), "one membership"
    assert sorted(held_out.labels.tolist()) == sorted(splits.eval.labels.tolist()), "one eval split"
    inputs = text_input(splits.train.tokenizer_texts(200_000), vocab_size=8000, max_length=128)
    settings = ModelSettings("text-linear", 3, inputs)
    config = TrainConfig(epochs=epochs, batch_size=64, lr=4.0, weight_decay=1e-5)
    return error_rates(settings, memory, splits.train, held_out, config, seeds)


def image_rates(folder: Path, epochs: int, seeds: list[int]) -> list[dict[str, float]]:
    files = sorted(folder.rglob("*.png"))
    splits = open_image_stream(str(folder))
    codes = torch.from_numpy(split_codes(key_ids([str(p.relative_to(folder)) for p in files]), 0.1, 0.2))
    whole = load_image_folder(folder)
    memory, held_out = whole.take(codes == TRAIN), whole.take(codes == EVAL)
    assert torch.equal(memory.labels, splits.train.labels), "one membership, one order"
    settings = ModelSettings("small-cnn", len(whole.classes), InputSpec.image(1, 28))
    config = TrainConfig(epochs=epochs, batch_size=128, lr=0.05)  # shifts and flips
    return error_rates(settings, memory, splits.train, held_out, config, seeds)


def main() -> None:
    parser = streaming_parser(__doc__.splitlines()[0], RESULTS, 4, "epochs of each training")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    if rewrote_only(args, HEADING, RESULTS, report):
        return
    with streaming_data(args.images) as (texts, images):
        data = {
            "tweets, text-linear": text_rates(texts, args.epochs, args.seeds),
            f"{args.images:,} Fashion-MNIST PNGs, small-cnn": image_rates(images, args.epochs, args.seeds),
        }
    results = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine(),
        "torch": torch.__version__,
        "epochs": args.epochs,
        "data": data,
    }
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    write_section(args.out, HEADING, report(results))


def spread(values: list[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{100 * statistics.mean(values):.2f} ± {100 * sd:.2f}"


def report(results: dict) -> str:
    """Per data set: each path's ER (mean ± sd over the seeds, %), the paired difference, and
    whether the difference lies within the seeds' own spread (two standard deviations of a path)."""
    table = []
    for data, rows in results["data"].items():
        memory, streamed = [r["in memory"] for r in rows], [r["streamed"] for r in rows]
        differences = [s - m for m, s in zip(memory, streamed)]
        noise = 2 * max(statistics.stdev(memory), statistics.stdev(streamed)) if len(rows) > 1 else 0.0
        within = abs(statistics.mean(differences)) <= noise
        table.append(
            [
                data,
                str(len(rows)),
                spread(memory),
                spread(streamed),
                f"{100 * statistics.mean(differences):+.2f}",
                f"{100 * noise:.2f}",
                "**yes**" if within else "**no**",
            ]
        )
    headers = [
        "data, model",
        "seeds",
        "ER in memory, %",
        "ER streamed, %",
        "streamed − in memory, pt",
        "noise, pt",
        "within",
    ]
    return f"""Command: `python -m benchmarks.streaming.fidelity --epochs {results["epochs"]}`, {results["date"]}, \
{results["machine"]}, torch {results["torch"]}; raw figures per seed in `{RESULTS}`. Per seed, one \
initialisation trained on the split in memory and on the same split streamed, both scored on one eval \
split. "Noise" is two standard deviations over the seeds of the path that varies more; "within" says \
whether the mean paired difference is inside it.

{markdown_table(headers, table)}
"""


if __name__ == "__main__":
    main()
