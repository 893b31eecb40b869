"""`congruent demo`: a real model update on Fashion-MNIST, in one process, in a few minutes.

Trains an old model (v1, a small MLP), then the new architecture (v2, a wider MLP) twice on the
same seed — without treatment and with Focal Distillation (FD-LM) toward v1 — saves every
version's predictions on the regression-eval split as .npy, and prints the `congruent compare`
table of v1 → v2 (none) and v1 → v2 (FD-LM).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from orchestrator.compare import compare_predictions, format_comparison
from workers.checkpoints import ModelSettings, save_checkpoint
from workers.data import DataError, load_splits
from workers.inference import FrozenModels, LocalReferences, predict_logits
from workers.objectives import Objective
from workers.trainer import EpochStats, TrainConfig, train


def _progress(name: str, epochs: int):
    def report(stats: EpochStats) -> None:
        print(
            f"  [{name}] epoch {stats.epoch}/{epochs}  loss {stats.loss:.3f}  "
            f"val ER {100 * stats.val_error_rate:.2f} %  {stats.samples_per_second:,.0f} samples/s",
            flush=True,
        )

    return report


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    try:
        splits = load_splits("fashion-mnist", train_limit=args.train_limit, eval_limit=args.eval_limit)
    except DataError as e:
        print(f"congruent demo: error: {e}", file=sys.stderr)
        return 2
    print(f"Fashion-MNIST: {len(splits.train)} train / {len(splits.val)} val / {len(splits.eval)} "
          f"regression-eval samples, fingerprint {splits.fingerprint}")
    config = TrainConfig(epochs=args.epochs, lr=0.05, augment=False, seed=args.seed)
    versions = [
        ("v1-old", "mlp-small", Objective("none")),
        ("v2-none", "mlp", Objective("none")),
        ("v2-fd-lm", "mlp", Objective("fd-lm")),
    ]
    references = None
    paths, predictions = [], []
    started = time.perf_counter()
    for name, arch, objective in versions:
        print(f"training {name}: {arch}, method {objective.method}", flush=True)
        settings = ModelSettings(arch, splits.num_classes, splits.in_channels, splits.image_size)
        model = settings.build(seed=args.seed)
        train(model, splits.train, config, objective, references, val=splits.val,
              on_epoch=_progress(name, config.epochs))
        logits = predict_logits(model, splits.eval)
        save_checkpoint(out / f"{name}.pt", model, settings, fingerprint=splits.fingerprint)
        paths.append(out / f"{name}.npy")
        np.save(paths[-1], logits.numpy())
        predictions.append(logits.numpy())
        if name == "v1-old":
            references = LocalReferences(old=FrozenModels([model]))
    labels_path = out / "labels.npy"
    np.save(labels_path, splits.eval.labels.numpy())
    result = compare_predictions(splits.eval.labels.numpy(), predictions)
    print(f"\nDone in {time.perf_counter() - started:.0f} s. Regression metrics on {result['n']} samples:\n")
    print(format_comparison(result, [p.stem for p in paths]))
    print(f"\nPredictions and checkpoints are in {out}/. Compare them again with:\n"
          f"  congruent compare --labels {labels_path} {' '.join(map(str, paths))}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("demo", help="a real model update on Fashion-MNIST in a few minutes")
    parser.add_argument("--out", default="demo-output", help="where predictions and checkpoints go")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train-limit", type=int, default=None, help="use only the first N training samples")
    parser.add_argument("--eval-limit", type=int, default=None, help="use only the first N regression-eval samples")
    parser.set_defaults(func=run)
