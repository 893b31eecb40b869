"""What the baselines benchmark trains (benchmarks/quality/baselines.py runs it, baselines_report.py writes
it up): the architectures, the data sets (text: the tweets and the two text sets `make` installs),
each one's budget on 2 CPUs, the sweep's candidate recipes, and a `Unit` — one training — with its
spec and the key a rerun recognises it by."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from workers.data.text_tables import NEWSGROUPS_CSV, REUTERS_R8_CSV
from workers.models.hf import MINILM_DIR
from workers.names import IMAGE_ARCHITECTURES, TEXT_ARCHITECTURES

SECTION = "## Baselines: each architecture with its defaults against the model a user would pick instead"
MINILM = f"hf:{MINILM_DIR}"  # the pretrained encoder `make` installs, fine-tuned with the hf: recipe
TEXT_ARCHS = (*TEXT_ARCHITECTURES, MINILM)
IMAGE_ARCHS = IMAGE_ARCHITECTURES
IMAGES = "fashion-mnist"
# The text sets each text architecture's defaults are chosen across (the mean of validation ER):
# short tweets in 3 classes, newswire stories in 8 topics, newsgroup posts in 20 groups.
TEXT_SETS: dict[str, dict[str, Any]] = {
    "tweets": {"dataset": "tweet-sentiment"},
    "reuters-r8": {"path": str(REUTERS_R8_CSV), "id_column": "id"},
    "20newsgroups": {"path": str(NEWSGROUPS_CSV), "id_column": "id"},
}
# An update's old model trains on the first half of the training split (by the fixed hash that
# `train_limit` ranks by): 13,640 of the tweets' 27,661, 2,809 of R8's 5,619, 6,838 of 20NG's 13,677.
HALF = {"tweets": 13640, "reuters-r8": 2809, "20newsgroups": 6838}


def short_name(arch: str) -> str:
    """`hf:all-MiniLM-L6-v2` for the installed encoder's long path; other names as they are."""
    return f"hf:{MINILM_DIR.name}" if arch == MINILM else arch


def sets_of(arch: str) -> tuple[str, ...]:
    """The data sets an architecture is measured on: every text set, or Fashion-MNIST."""
    return tuple(TEXT_SETS) if arch in TEXT_ARCHS else (IMAGES,)


@dataclass(frozen=True)
class Budget:
    """What an architecture trains and is scored on here: the first `train_limit` training samples
    and `eval_limit` regression-eval samples (None: all), `seeds` seeds in the table, and why."""

    train_limit: int | None = None
    eval_limit: int | None = None
    seeds: int = 3
    why: str = ""
    old_seeds: int = 3  # text: seeds whose old model (half the training split) is trained for NFR
    tokenizer: dict[str, Any] = field(default_factory=dict)  # the spec's tokenizer section, where cut


FULL = Budget()
MINILM_WHY = (
    "22 samples/s at 56 tokens on one core (all-MiniLM-L6-v2, 22.7 M parameters): the recipe's 6 epochs of "
    "the 27,661 tweets take two hours"
)
# by arch, or by (arch, set) where the set decides; measured on one core here: samples/s of a training step
BUDGETS: dict[str | tuple[str, str], Budget] = {
    "resnet8": Budget(20000, why="750 samples/s: 10 epochs of all 54,000 images take 12 min"),
    "resnet20": Budget(10000, why="290 samples/s: 10 epochs of all 54,000 images take 31 min"),
    "resnet32": Budget(10000, why="160 samples/s: 10 epochs of all 54,000 images take 56 min"),
    "resnet18": Budget(1000, 2000, why="22 samples/s: an epoch of all 54,000 images takes 41 min"),
    "resnet34": Budget(1000, 2000, seeds=1, why="9 samples/s: an epoch of all 54,000 images takes 100 min"),
    "resnet50": Budget(1000, 2000, seeds=1, why="7 samples/s: an epoch of all 54,000 images takes 130 min"),
    "text-cnn": Budget(old_seeds=1, why="NFR over 1 seed: an old and a new training take 7 min on the tweets"),
    "text-transformer": Budget(old_seeds=1, why="NFR over 1 seed: an old and a new training take 15 min"),
    (MINILM, "tweets"): Budget(2000, 2000, old_seeds=1, why=MINILM_WHY + "; NFR over 1 seed"),
    (MINILM, "reuters-r8"): Budget(
        1000,
        1455,
        old_seeds=1,
        tokenizer={"max_length": 128},
        why="8 samples/s at 256 tokens: cut at 128 tokens, 1,000 stories; NFR over 1 seed",
    ),
    (MINILM, "20newsgroups"): Budget(
        1000,
        2000,
        old_seeds=1,
        tokenizer={"max_length": 128},
        why="8 samples/s at 256 tokens: cut at 128 tokens, 1,000 posts; NFR over 1 seed",
    ),
}


def budget_of(arch: str, dataset: str) -> Budget:
    return BUDGETS.get((arch, dataset), BUDGETS.get(arch, FULL))


def old_limit(arch: str, dataset: str) -> int:
    """The old model's training samples: half of the new one's (its budget's, else the set's)."""
    budget = budget_of(arch, dataset)
    return budget.train_limit // 2 if budget.train_limit else HALF[dataset]


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
    # pooled by tf × idf (as text-linear), a short text's few features weigh more each than a long
    # one's many: tweets overfit at rates long texts need (tweets best at lr 0.1, R8 and 20NG at 1);
    # weight decay holds the tweets back at those rates
    "text-bag": [
        *(sgd(lr, 0.0) for lr in (0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0)),
        adamw(3e-3),
        sgd(4.0, 0.0, epochs=20),
        sgd(1.0, 1e-4, epochs=20),
        sgd(0.5, 1e-4, epochs=20),
        *(sgd(1.0, wd) for wd in (1e-4, 3e-4, 1e-3)),
        *(sgd(2.0, wd) for wd in (3e-4, 1e-3)),
    ],
    # 4 epochs left it short of training on the long texts (20NG, seed 0: 20.2 % eval ER at 4, 14.1 % at 10)
    "text-cnn": [sgd(0.02, 0.0), adamw(3e-4), adamw(1e-3), adamw(3e-3), adamw(1e-3, epochs=10), adamw(3e-3, epochs=10)],
    "text-transformer": [adamw(3e-4), adamw(1e-3), adamw(3e-3)],
    # a pretrained encoder: BERT's fine-tuning rates (Devlin et al. 2019, A.3) and two above (a small
    # model on a few thousand samples), at the hf: recipe's schedule (linear warm-up and decay, no
    # decay on biases and norms, clip 1); and the highest at twice the epochs: 3 left 20NG's 1,000 posts
    # underfitted (seed 0: eval ER 35.2 % at 3, 23.8 % at 6)
    MINILM: [adamw(2e-5), adamw(5e-5), adamw(1e-4), adamw(2e-4), adamw(2e-4, epochs=6)],
}


def data_of(arch: str, old: bool = False, dataset: str = "") -> dict[str, Any]:
    """The spec's `data` of `arch`'s units on `dataset` (default: its first set): its budget's
    slices; `old`, the first half of the training split (`old_limit`)."""
    dataset = dataset or sets_of(arch)[0]
    budget = budget_of(arch, dataset)
    source = TEXT_SETS[dataset] if arch in TEXT_ARCHS else {}
    train_limit = old_limit(arch, dataset) if old else budget.train_limit
    return {**source, "train_limit": train_limit, "eval_limit": budget.eval_limit}


@dataclass(frozen=True)
class Unit:
    """One training: `arch` with the spec's `train` fields `train` (empty: its defaults), `seed`, on
    `dataset` (empty: the architecture's first set); `old`: an update's old model, trained on the
    first half of the (text) training split."""

    part: str  # sweep | table
    arch: str
    seed: int
    train: dict[str, Any] = field(default_factory=dict)
    old: bool = False
    dataset: str = ""

    @property
    def data_set(self) -> str:
        return self.dataset or sets_of(self.arch)[0]


def spec_of(unit: Unit) -> Any:
    from pipelines.spec import parse_spec

    tokenizer = budget_of(unit.arch, unit.data_set).tokenizer
    return parse_spec(
        {
            "model": "baselines",
            "version": "unit",
            "arch": unit.arch,
            "data": data_of(unit.arch, unit.old, unit.data_set),
            "train": {**unit.train, "seed": unit.seed},
            **({"tokenizer": tokenizer} if tokenizer else {}),
        }
    )


# Settings added to TrainConfig after results were recorded, at the value every earlier training
# ran with: left out of a key at that value, so those results stay theirs.
ADDED_SINCE: dict[str, Any] = {"weight_decay_on": "all", "adapter": None, "distill_inputs": None}


def key_of(unit: Unit) -> str:
    """What makes two units the same training: the resolved settings, the seed and the data (and
    the tokenizer's cut where the budget sets one)."""
    from orchestrator.planning.plan import train_config
    from pipelines.spec import WorkerResources

    config = asdict(train_config(spec_of(unit), unit.seed, WorkerResources()))
    for name, value in ADDED_SINCE.items():
        if name in config and config[name] == value:
            del config[name]
    key: dict[str, Any] = {"arch": unit.arch, "config": config, "data": data_of(unit.arch, unit.old, unit.data_set)}
    tokenizer = budget_of(unit.arch, unit.data_set).tokenizer
    if tokenizer:
        key["tokenizer"] = tokenizer
    return json.dumps(key, sort_keys=True)
