"""The sections of an update-pipeline spec (pipelines/spec.py `UpdateSpec`): method, training and
tokenizer (data is in pipelines/data_section.py; resources, the promotion gate and the Tune search in
pipelines/operations.py), each a strict pydantic model
(unknown keys and out-of-range values are rejected). No torch import."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from workers.names import AUTO_CANDIDATES, LADDER_FIELDS, METHODS, PROXIMAL_WEIGHT, ladder_rung


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MethodSpec(_Strict):
    """How the new version is trained (docs/methods.md has the losses and their papers)."""

    name: Literal[METHODS] = Field(  # type: ignore[valid-type]
        "none",
        description="the treatment; none (the default): one plain model, what a first version is; kd, fd-*, "
        "dynamic-fd, bcwi and proximal need `old`; elodi and ensemble train `m` replicas; auto (needs `old`): trains "
        "no treatment and the `candidates` that fit `budget`, tests them against no treatment on the val split "
        "in the order of `candidates` (stopping at the first that fails), and ships the largest NFR cut among "
        "those proven: the upper 95% bound of the ER change ≤ `max_er_increase` and NFR proven lower; else no "
        "treatment (the eval split is never used to choose)",
    )
    m: int = Field(
        8,
        ge=1,
        le=64,
        description="replicas in the ensemble (elodi, ensemble); at most 64: each is "
        "a full training with its own checkpoint, and the paragon's NFR levels off by m = 4–8 "
        "(docs/benchmarks/index.md)",
    )
    alpha: float | None = Field(None, ge=0, le=1, description="weight of the distillation term; None: method default")
    k: int = Field(10, ge=1, description="LDI: classes per sample")
    topk_by: Literal["teacher", "student", "union"] = Field(
        "teacher", description="LDI: whose largest logits pick the K classes"
    )
    p: float = Field(2.0, gt=0, description="LDI: the p of the ‖·‖ₚ on logit differences")
    margin: float = Field(0.0, ge=0, description="LDI: differences below this margin cost nothing")
    ldi_reduction: Literal["sum", "mean"] = Field(
        "sum",
        description="LDI per sample: the sum over the K selected classes (ELODI Eq. 8), or their mean "
        "(the reference code's; 1/K the size)",
    )
    exclude_label: bool = Field(False, description="LDI leaves the true class's term out (the reference code does)")
    legacy_weight: float | None = Field(None, ge=0, le=1, description="λ of ELODI Eq. 9; needs `old`")
    temperature: float | None = Field(None, gt=0, description="KD / FD-KL temperature; None: the method default")
    focal_alpha: float = Field(1.0, ge=0, description="FD: weight of every sample in the distillation term")
    focal_beta: float = Field(5.0, ge=0, description="FD: extra weight of samples the old model gets right")
    distance: Literal["lm", "kl"] = Field("lm", description="dynamic-fd: logit matching or KL")
    bcwi_alphas: tuple[float, ...] = Field(
        tuple(i / 10 for i in range(11)), min_length=1, description="BCWI: interpolation weights tried on the val split"
    )
    bcwi_er_tolerance: float = Field(
        0.005,
        ge=0,
        description="BCWI: allowed val ER above α = 0, on cross-fitted figures too (α picked on one half "
        "of val, its errors counted on the other, and swapped)",
    )
    proximal_weight: float = Field(
        PROXIMAL_WEIGHT,
        ge=0,
        description="proximal: λ of its pull toward the old weights, CE + λ·½ Σ‖w − w_old‖² (summed over every "
        "weight; it acts as weight decay toward the old weights, so its hold over a run grows with lr × steps). "
        f"{PROXIMAL_WEIGHT:g}: the largest λ tried that cost at most +0.2 pt of eval ER against no treatment on the "
        "tweets (text-linear, text-bag) and Fashion-MNIST (mlp-small), at 0.22–1.07× its flips; 0.01 flipped less "
        "at up to +1.1 pt (docs/methods.md)",
    )
    candidates: tuple[str, ...] = Field(
        AUTO_CANDIDATES[1:],
        min_length=1,
        description="auto: the treatments it may train beside no treatment (always trained: the ER it is held "
        "to), in the fixed order they are tested in (the testing stops at the first that fails, so put the "
        f"least aggressive first); the default: {', '.join(AUTO_CANDIDATES[1:])}. "
        "bcwi and proximal only where `arch` and `train.adapter` are the old model's; "
        "elodi-legacy is elodi with the legacy term (λ `legacy_weight`, else 0.8); the two elodi share `m` replicas; "
        "a rung NAME_VALUE is NAME with its weight at VALUE (kd_0.1, fd-lm_0.2: alpha; proximal_0.0003: "
        "proximal_weight), so a ladder of them, weakest first, tests one method at several strengths",
    )
    budget: int | None = Field(
        None,
        ge=2,
        description="auto: the most trainings it runs (each a full training of `arch`, a replica one each); "
        "candidates are taken in their order while they fit: no treatment, proximal, bcwi, kd and fd-lm 1 each, "
        "elodi-legacy m + 1 (its replicas), elodi 1 more. null: every candidate",
    )
    max_er_increase: float = Field(
        0.003,
        ge=-1,
        le=1,
        description="auto: a candidate is eligible when the upper 95% bound of its val ER − no treatment's "
        "(paired, Tango's score bound, as the promotion gate's) is at most this (a fraction: 0.003 is 0.3 "
        "points), and its NFR is proven lower than no treatment's; no treatment itself always is",
    )

    train_untested: bool = Field(
        False,
        description="auto: also train the candidates after the first that fails its test, to show their figures "
        "(they cannot ship: the fixed order stops there); false (the default): training stops there too",
    )
    cross_fit: Literal["auto", "off"] | int = Field(
        "auto",
        description="auto: test the candidates that train once (none, kd, fd-lm, bcwi, proximal) on J of the K = "
        "1/data.val_fraction folds of train ∪ val besides the val split: each trains J more times, fold k on the "
        "other folds (as many samples as the shipped model), the old model fixed, and each sample of the J folds "
        "is predicted by a model that never trained on it (bounds widened for the folds' overlap: Nadeau & "
        "Bengio 2003); rows the old model trained on are not counted. J (≥ 2), off, or auto: 3 when no "
        "treatment's training took at most 2 minutes (measured in the run), else off, and only for a candidate "
        "whose val figures the folds' samples could prove (one that fails on val and would still fail with "
        "them at the same proportions is tested on val); a streamed source is never cross-fitted",
    )

    @field_validator("cross_fit")
    @classmethod
    def _at_least_two_folds(cls, value: str | int) -> str | int:
        if isinstance(value, int) and value < 2:
            raise ValueError(f"cross_fit needs at least 2 folds, got {value} (off: no cross-fitting)")
        return value

    @field_validator("candidates")
    @classmethod
    def _known_candidates(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [v for v in values if v.partition("_")[0] not in AUTO_CANDIDATES[1:]]  # a rung: NAME_VALUE
        if unknown:
            known = ", ".join(AUTO_CANDIDATES[1:])
            raise ValueError(f"unknown auto candidates {', '.join(unknown)}; the known: {known}")
        for value in values:
            base, number = ladder_rung(value)
            if number is None:
                continue
            field = LADDER_FIELDS[base]
            high = 1.0 if field == "alpha" else math.inf
            if not 0 < number <= high or not math.isfinite(number):
                raise ValueError(f"auto candidate {value}: {base}'s {field} must lie in (0, {high:g}]")
        return tuple(dict.fromkeys(values))  # each once, in the order written

    @field_validator("bcwi_alphas")
    @classmethod
    def _alphas_in_range(cls, values: tuple[float, ...]) -> tuple[float, ...]:
        if any(not 0 <= a <= 1 for a in values):
            raise ValueError("every BCWI alpha must lie in [0, 1]")
        return values


class AdapterSpec(_Strict):
    """LoRA (Hu et al. 2022, on `peft`): each target linear layer W of an hf:DIR model gains a trainable
    low-rank update, W x + (alpha / rank) · B A x with A rank×in, B out×rank (B starts at 0); W and
    every other weight of the base stay frozen, the classifier head trains."""

    kind: Literal["lora"] = "lora"
    rank: int = Field(8, ge=1, le=1024, description="r: the rank of each update")
    alpha: int = Field(16, ge=1, description="the update's scale is alpha / rank")
    targets: list[str] = Field(
        ["query", "value"],
        min_length=1,
        description="the linear layers that get an update, by the last part of their module names (BERT's "
        "attention query and value, as in the LoRA paper)",
    )
    dropout: float = Field(0.1, ge=0, lt=1, description="dropout on the update's input")


class DistillInputsSpec(_Strict):
    """A perturbed copy of each training batch for the distillation term (workers/training/perturb.py):
    the student distils on the batch and on the copy (α·½·[D(s) + D(s′)]), the teachers' logits those of
    the batch itself; CE reads the batch only. Costs a second student forward and backward per step."""

    perturb: Literal["token-dropout"] = Field(
        "token-dropout", description="token-dropout (text): each token but the first is dropped (masked as padding)"
    )
    rate: float = Field(0.1, gt=0, lt=1, description="the chance that a token is dropped")


class TrainSpec(_Strict):
    """SGD with Nesterov momentum, per-epoch checkpoints; replicas use seeds seed + 1 … seed + m."""

    epochs: int = Field(10, ge=1)
    student_epochs: int | None = Field(
        None,
        ge=1,
        description="the deployed model's epochs (the distilled student; the replicas keep `epochs`); null: "
        "`epochs`. Distillation gains from a longer schedule where plain training does not "
        '(docs/benchmarks/quality.md, "The demo")',
    )
    batch_size: int = Field(128, ge=1)
    optimizer: Literal["sgd", "adamw"] = Field(
        "sgd",
        description="sgd: SGD with Nesterov momentum and L2 weight decay; adamw: AdamW (Loshchilov & Hutter "
        "2019), weight decay decoupled, momentum unused",
    )
    lr: float = Field(0.1, gt=0, description="peak learning rate")
    momentum: float = Field(0.9, ge=0, lt=1, description="SGD's momentum")
    weight_decay: float = Field(5e-4, ge=0)
    weight_decay_on: Literal["all", "weights"] = Field(
        "all",
        description="the parameters weight decay applies to: all, or weights only (not biases nor the "
        "parameters of normalisation layers, as BERT's fine-tuning does)",
    )
    schedule: Literal["cosine", "step", "linear"] = Field(
        "cosine",
        description="after the warm-up: cosine from lr to 0, step: ×0.1 at 50 % and 75 % of the epochs, "
        "linear: from lr to 0 (BERT's fine-tuning schedule)",
    )
    warmup_epochs: Literal["auto"] | float = Field(
        "auto",
        description="linear learning-rate warm-up from lr/steps to lr over this many epochs, then the "
        "schedule; auto: 1 epoch (at most a tenth of the run) for a student trained with LDI (elodi: its squared "
        "logit differences diverge at full lr from a fresh start, docs/methods.md), none otherwise",
    )
    seed: int = Field(0, ge=0, description="the deployed model's seed (initialisation and batch order)")
    augment: bool = Field(True, description="the master switch of augmentation: false trains on the images as they are")
    crop: Literal["auto", "resized"] | int = Field(
        "auto",
        description="random crop: each image shifted by up to ± this many pixels (zero padding; 0: no crop), or "
        "resized: a random-resized crop (area 35–100 %, aspect ratio 3/4–4/3) scaled back to the image size; "
        "auto: resized with data.image_size, else a 2-pixel shift",
    )
    freeze: Literal["none", "backbone"] = Field(
        "none",
        description="backbone: only the classifier head trains (what the architecture names its classifier: `fc` "
        "of torchvision's ResNets, `head` of the text models, the modules outside an hf:DIR model's base model such "
        "as DistilBERT's pre_classifier and classifier, else the last linear layer) — fine-tuning from `init` or an "
        "hf:DIR directory; the backbone runs in eval mode (no dropout, BatchNorm statistics as they started); the "
        "trainable parameter count is logged with each training",
    )
    flip: Literal["auto", True, False] = Field(
        "auto",
        description="random horizontal flip; auto: on for the built-in Fashion-MNIST (a mirrored garment "
        "keeps its class) and for photos resized by data.image_size, off for other `data.path` images (a "
        "mirrored digit or letter may not keep its class)",
    )
    max_grad_norm: float | None = Field(5.0, gt=0, description="gradient-norm clipping; null: none")
    prefetch: int = Field(2, ge=1, description="teacher batches requested ahead of the step")
    precision: Literal["fp32", "bf16"] = Field(
        "fp32",
        description="bf16: forward passes under bf16 autocast (replicas, student and teachers); losses and "
        "metrics fp32; packed replicas (resources.replica.pack > 1) train fp32",
    )
    adapter: AdapterSpec | None = Field(
        None,
        description="hf:DIR models: train a LoRA adapter (and the classifier head) on the frozen pretrained "
        "model instead of all its weights; its recipe's lr is then the adapter's (docs/spec-reference.md, "
        "defaults). The version's checkpoint holds the base weights and the adapter, unmerged",
    )
    compile: bool | Literal["default", "reduce-overhead", "max-autotune"] = Field(
        False,
        description="torch.compile the training step's model (true: mode default); pays on GPUs, "
        "see docs/benchmarks/index.md",
    )
    distill_inputs: DistillInputsSpec | None = Field(
        None,
        description="text: the distillation term also reads a perturbed copy of each batch (token dropout), "
        "so a set without `data.unlabelled` still distils on more than it trains on; a distilling method only "
        "(kd, fd-*, dynamic-fd, elodi, auto's distilling candidates). null: off",
    )
    protected_weight: int | None = Field(
        None,
        ge=1,
        description="text: the model's protected samples (`congruent protect`) that are in neither the val nor "
        "the eval split join the train split this many times each, so their loss weighs that much in every "
        "epoch (those of val or eval are left out, counted). null: the protected set is not trained on",
    )

    @field_validator("crop")
    @classmethod
    def _crop_not_negative(cls, value: str | int) -> str | int:
        if isinstance(value, int) and value < 0:
            raise ValueError("crop must be auto, resized or a number of pixels ≥ 0")
        return value

    @field_validator("warmup_epochs")
    @classmethod
    def _warmup_not_negative(cls, value: str | float) -> str | float:
        if not isinstance(value, str) and value < 0:  # the only string the field type admits is "auto"
            raise ValueError("warmup_epochs must be auto or a number of epochs ≥ 0")
        return value


LENGTH_PERCENTILE = 95  # tokenizer.max_length auto for hf:DIR: this percentile of the token counts…
LENGTH_SAMPLE = 20_000  # …of this many training texts, spread over the split…
LENGTH_CAP = 256  # …at most this (and the model's positions)
BUILT_IN_LENGTH = 128  # tokenizer.max_length auto for a tokenizer trained here…
BAG_LENGTH = 512  # …and for text-linear and text-bag (bags of 1–2-grams: long texts cost them little, and help)


class TokenizerSpec(_Strict):
    """Text data only: each version's tokenizer, trained on its train split (a streamed split: its
    first 200,000 texts, in the split's fixed order; Hugging Face `tokenizers`) and saved in its
    checkpoints and registered version."""

    kind: Literal["wordpiece", "bpe"] = Field("wordpiece", description="WordPiece or byte-pair encoding")
    vocab_size: int = Field(8000, ge=100, le=1_000_000, description="the vocabulary's size at most")
    max_length: Literal["auto"] | int = Field(
        "auto",
        description=f"tokens kept per text (the rest cut); auto: {BUILT_IN_LENGTH} for a tokenizer trained here "
        f"({BAG_LENGTH} for text-linear and text-bag), and for an "
        f"hf:DIR model the {LENGTH_PERCENTILE}th percentile of the training texts' token counts (special tokens "
        f"included; {LENGTH_SAMPLE:,} texts spread over the split), rounded up to a multiple of 8, at most "
        f"{LENGTH_CAP} and the model's positions",
    )

    @field_validator("max_length")
    @classmethod
    def _length_in_range(cls, value: str | int) -> str | int:
        if isinstance(value, int) and not 4 <= value <= 4096:
            raise ValueError("max_length must be auto or a number of tokens from 4 to 4096")
        return value
