"""Each architecture's training recipe: what the spec's `train` section means where it leaves a
field out. A spec's own values win; the resolved values are part of the spec from then on (its
hash, the MLflow params of every run, each training's `train.*` params).

The built-in recipes were chosen by measurement on the built-in data (`python -m benchmarks.quality.baselines
--part sweep`: each candidate trained once, scored on the validation split), and checked against
the baseline a user would pick instead (`--part table`, 3 seeds on the regression-eval split):
docs/spec-reference.md ("Defaults of each architecture") and docs/benchmarks/quality.md ("Baselines") have
the figures. Imports no torch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Literal

from workers.names import is_hf


@dataclass(frozen=True)
class Recipe:
    """The `train` fields an architecture fills in: optimiser, peak learning rate, weight decay,
    epochs, batch size, whether images are augmented (random crops and flips: an MLP, with no
    translation invariance of its own, learns less from shifted images in the epochs it gets), and
    the warm-up of a plain training (`warmup_epochs: auto`; an ELODI student warms up at least 1
    epoch, docs/methods.md), the schedule after it, which parameters weight decay applies to, and the
    gradient-norm clipping."""

    optimizer: Literal["sgd", "adamw"]
    lr: float
    weight_decay: float
    epochs: int
    batch_size: int = 128
    augment: bool = True
    warmup_epochs: float = 0.0
    schedule: Literal["cosine", "step", "linear"] = "cosine"
    weight_decay_on: Literal["all", "weights"] = "all"
    max_grad_norm: float | None = 5.0

    def train_fields(self) -> dict[str, object]:
        """The spec's `train` fields this recipe fills in (warm-up stays `auto`: resolved per training)."""
        fields = asdict(self)
        fields.pop("warmup_epochs")
        return fields


# For an architecture of the user's own (`module:function`): SGD at the rate that suits the CIFAR
# ResNets it was first written for.
GENERIC = Recipe("sgd", 0.1, 5e-4, 10)

RECIPES: dict[str, Recipe] = {
    "mlp-small": Recipe("sgd", 0.03, 5e-4, 10, augment=False),
    "mlp": Recipe("adamw", 1e-3, 0.01, 10, augment=False),
    "small-cnn": Recipe("sgd", 0.1, 5e-4, 10),
    "lenet": Recipe("sgd", 0.1, 5e-4, 10),
    "resnet8": Recipe("sgd", 0.1, 5e-4, 10),
    "resnet20": Recipe("sgd", 0.05, 5e-4, 10),
    "resnet32": Recipe("sgd", 0.05, 5e-4, 10),  # resnet20's (not swept)
    # swept on 1000 images (benchmarks/quality/baselines.py says why): batch 32 for 4× the steps of 128
    "resnet18": Recipe("sgd", 0.05, 5e-4, 10, 32),
    "resnet34": Recipe("sgd", 0.05, 5e-4, 10, 32),  # resnet18's (not swept)
    "resnet50": Recipe("sgd", 0.05, 5e-4, 10, 32),  # resnet18's (not swept)
    # a convex model run to its optimum: 30 epochs, lr decayed to 0 (seeds then change ~0.3 % of predictions)
    "text-linear": Recipe("sgd", 4.0, 1e-5, 30, 64),
    # pooled by tf × idf: weight decay keeps the tweets from overfitting at the rate long texts need
    "text-bag": Recipe("sgd", 1.0, 1e-3, 5, 64),
    # 10 epochs, not 4: the long texts need them (20NG val ER 15.6 % at 10, 20.7 % at 4); the tweets lose 0.7 pt
    "text-cnn": Recipe("adamw", 3e-3, 0.01, 10, 64),
    "text-transformer": Recipe("adamw", 3e-3, 0.01, 4, 64, warmup_epochs=0.5),
}

# `hf:DIR`: a pretrained transformer fine-tuned as BERT is (Devlin et al. 2019, appendix A.3; Hugging
# Face's Trainer): AdamW, batch 32, linear warm-up over 0.3 epoch then linear decay to 0, no weight
# decay on biases and LayerNorms, gradient norm clipped at 1. The rate, 2e-4, and the epochs, 6, were
# chosen by the sweep on the installed MiniLM over three text sets (2e-5 … 2e-4 at BERT's 3 epochs: the
# highest won on each; on their 1,000–2,000-sample slices a run is about 95–190 steps, and BERT-base's
# 2e-5 to 5e-5 barely moves a 6-layer model in that many; then 6 epochs at 2e-4: mean val ER 17.2 %
# against 21.3 %, 20NG's 1,000 posts 23.4 % against 34.1 %; docs/benchmarks/quality.md, "Baselines").
HF = Recipe(
    "adamw", 2e-4, 0.01, 6, 32, warmup_epochs=0.3, schedule="linear", weight_decay_on="weights", max_grad_norm=1.0
)


# `hf:DIR` with `train.adapter`: the same at 2e-3, where only the adapter and the head learn. The LoRA
# paper's RoBERTa-base rate (Hu et al. 2022: 4e-4 to 5e-4, over thousands of steps) left MiniLM never
# predicting one of the tweets' three classes after 96 steps on 500 of them (val ER 39.8-40.7 %, full
# fine-tuning 29.9-32.0 %). At 2e-3 the new model's val ER is full fine-tuning's (28.24 against 28.62 %;
# eval 29.05 against 27.75 %, NFR 5.93 against 7.23 %): `python -m benchmarks.quality.adapter_flips`, 3 seeds,
# the tweets only (docs/benchmarks/quality.md, "LoRA adapters against full fine-tuning").
HF_ADAPTER = replace(HF, lr=2e-3)


def recipe_for(arch: str, adapter: bool = False) -> Recipe:
    """The recipe of `arch`: a built-in's own, `hf:DIR`'s (with `adapter`: an adapter's), else the
    generic one."""
    if is_hf(arch):
        return HF_ADAPTER if adapter else HF
    return RECIPES.get(arch, GENERIC)
