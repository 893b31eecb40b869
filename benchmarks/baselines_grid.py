"""What the baselines benchmark trains (benchmarks/baselines.py runs it, baselines_report.py writes
it up): the architectures, each one's budget on 2 CPUs, the sweep's candidate recipes, and a
`Unit` — one training — with its spec and the key a rerun recognises it by."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from workers.names import IMAGE_ARCHITECTURES, TEXT_ARCHITECTURES

SECTION = "## Baselines: each architecture with its defaults against the model a user would pick instead"
TEXT_ARCHS = TEXT_ARCHITECTURES
IMAGE_ARCHS = IMAGE_ARCHITECTURES


@dataclass(frozen=True)
class Budget:
    """What an architecture trains and is scored on here: the first `train_limit` training samples
    and `eval_limit` regression-eval samples (None: all), `seeds` seeds in the table, and why."""

    train_limit: int | None = None
    eval_limit: int | None = None
    seeds: int = 3
    why: str = ""
    old_seeds: int = 3  # text: seeds whose old model (half the training split) is trained for NFR


FULL = Budget()
BUDGETS: dict[str, Budget] = {  # measured on one core here: samples/s of a training step, batch 128
    "resnet8": Budget(20000, why="750 samples/s: 10 epochs of all 54,000 images take 12 min"),
    "resnet20": Budget(10000, why="290 samples/s: 10 epochs of all 54,000 images take 31 min"),
    "resnet32": Budget(10000, why="160 samples/s: 10 epochs of all 54,000 images take 56 min"),
    "resnet18": Budget(1000, 2000, why="22 samples/s: an epoch of all 54,000 images takes 41 min"),
    "resnet34": Budget(1000, 2000, seeds=1, why="9 samples/s: an epoch of all 54,000 images takes 100 min"),
    "resnet50": Budget(1000, 2000, seeds=1, why="7 samples/s: an epoch of all 54,000 images takes 130 min"),
    "text-cnn": Budget(old_seeds=1, why="NFR over 1 seed: an old and a new training take 10 min"),
    "text-transformer": Budget(old_seeds=1, why="NFR over 1 seed: an old and a new training take 15 min"),
}
OLD_TEXT_LIMIT = 13640  # half of the tweets' 27,280 training samples: an update's old model

# The sweep's candidates: `train` fields tried against each architecture's recipe (which is one of
# them); the recipe is the candidate with the lowest validation ER. resnet32 is not swept: it takes
# resnet20's recipe (one family, He et al. 2016's own recipe for both), and 3 candidates would cost
# half an hour of one core; resnet34 and resnet50 take resnet18's the same way (torchvision's family).
SGD, ADAMW = "sgd", "adamw"


def sgd(lr: float, weight_decay: float = 5e-4, **more: Any) -> dict[str, Any]:
    return {"optimizer": SGD, "lr": lr, "weight_decay": weight_decay, **more}


def adamw(lr: float, weight_decay: float = 0.01, **more: Any) -> dict[str, Any]:
    return {"optimizer": ADAMW, "lr": lr, "weight_decay": weight_decay, **more}


FLAT = {"augment": False}  # images as they are: no random crops or flips
CROPS = {"augment": True}  # random crops and flips (the MLPs' recipes turn them off)
MLP_FLAT = [sgd(0.03, **FLAT), sgd(0.1, **FLAT), adamw(1e-3, **FLAT)]


CANDIDATES: dict[str, list[dict[str, Any]]] = {
    "mlp-small": [*(sgd(lr, **CROPS) for lr in (0.01, 0.03, 0.1)), adamw(1e-3, **CROPS), *MLP_FLAT],
    "mlp": [*(sgd(lr, **CROPS) for lr in (0.01, 0.03, 0.1)), adamw(1e-3, **CROPS), *MLP_FLAT],
    "small-cnn": [sgd(0.03), sgd(0.1), adamw(1e-3)],
    "lenet": [sgd(0.01), sgd(0.03), sgd(0.1)],
    "resnet8": [sgd(0.05), sgd(0.1), adamw(1e-3)],
    "resnet20": [sgd(0.05), sgd(0.1), adamw(1e-3)],
    # 1000 images: 10 epochs at batch 128 are 80 steps, too few for a ResNet-18 from scratch (eval ER
    # 27.4 %, linear 20.2 %); batch 32 gives it 4× the steps in the same time
    "resnet18": [sgd(0.1), sgd(0.05, batch_size=32), adamw(1e-3, batch_size=32)],
    # a convex model: candidates that run to its optimum (lr decayed to 0 over enough epochs)
    "text-linear": [sgd(2.0, 0.0, epochs=20), sgd(4.0, 1e-5, epochs=30), adamw(1e-2, 0.0, epochs=10)],
    "text-bag": [sgd(1.0, 0.0), sgd(2.0, 0.0), sgd(4.0, 0.0), adamw(3e-3)],
    "text-cnn": [sgd(0.02, 0.0), adamw(3e-4), adamw(1e-3), adamw(3e-3)],
    "text-transformer": [adamw(3e-4), adamw(1e-3), adamw(3e-3)],
}


def data_of(arch: str, old: bool = False) -> dict[str, Any]:
    """The spec's `data` of `arch`'s units: its budget's slices; `old`, the first half of the tweets."""
    budget = BUDGETS.get(arch, FULL)
    source = {"dataset": "tweet-sentiment"} if arch in TEXT_ARCHS else {}
    train_limit = OLD_TEXT_LIMIT if old else budget.train_limit
    return {**source, "train_limit": train_limit, "eval_limit": budget.eval_limit}


@dataclass(frozen=True)
class Unit:
    """One training: `arch` with the spec's `train` fields `train` (empty: its defaults), `seed`;
    `old`: an update's old model, trained on the first half of the (text) training split."""

    part: str  # sweep | table
    arch: str
    seed: int
    train: dict[str, Any] = field(default_factory=dict)
    old: bool = False


def spec_of(unit: Unit) -> Any:
    from pipelines.spec import parse_spec

    return parse_spec(
        {
            "model": "baselines",
            "version": unit.arch,
            "arch": unit.arch,
            "data": data_of(unit.arch, unit.old),
            "train": {**unit.train, "seed": unit.seed},
        }
    )


def key_of(unit: Unit) -> str:
    """What makes two units the same training: the resolved settings, the seed and the data."""
    from orchestrator.planning.plan import train_config
    from pipelines.spec import WorkerResources

    config = asdict(train_config(spec_of(unit), unit.seed, WorkerResources()))
    return json.dumps({"arch": unit.arch, "config": config, "data": data_of(unit.arch, unit.old)}, sort_keys=True)
