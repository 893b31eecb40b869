"""The update-pipeline spec: one YAML file per model version, validated before any work starts.

    model: fmnist-classifier        # registered model name
    version: v2                     # free label
    data: {dataset: fashion-mnist, subset: all, train_limit: null, eval_limit: null}
    arch: resnet8
    method: {name: elodi, m: 8, alpha: 0.8, k: 10, topk_by: teacher, legacy_weight: null}
    old: runs/fmnist-classifier/v1/model.pt   # checkpoint path; needed by kd/fd*/bcwi/legacy
    train: {epochs: 10, batch_size: 128, lr: 0.1, seed: 0, augment: true}
    resources: {replica: {cpus: 1, gpus: 0}, teacher_actors: 2}

Unknown keys, wrong types and out-of-range values are rejected by pydantic; `load_spec` turns the
first problem into one line naming the field.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from workers.models import ModelError, resolve_factory
from workers.objectives import Objective
from workers.trainer import TrainConfig

METHOD_NAMES = ("none", "kd", "fd-kl", "fd-lm", "dynamic-fd", "ensemble", "elodi", "bcwi")
NEEDS_OLD = ("kd", "fd-kl", "fd-lm", "dynamic-fd", "bcwi")


class SpecError(ValueError):
    """A spec that cannot run; the message is one line naming the field and the problem."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DataSpec(_Strict):
    dataset: Literal["fashion-mnist"] | None = None
    path: str | None = None  # an IDX directory, an ImageFolder tree or an .npz (x, y)
    subset: Literal["all", "half-classes", "half-samples"] = "all"
    train_limit: int | None = Field(None, ge=1)
    eval_limit: int | None = Field(None, ge=1)
    val_fraction: float = Field(0.1, gt=0, lt=1)
    eval_fraction: float = Field(0.2, gt=0, lt=1)

    @model_validator(mode="after")
    def _one_source(self) -> "DataSpec":
        if self.dataset is not None and self.path is not None:
            raise ValueError("give either dataset or path, not both")
        return self

    @property
    def source(self) -> str:
        return self.path if self.path is not None else (self.dataset or "fashion-mnist")


class MethodSpec(_Strict):
    name: Literal["none", "kd", "fd-kl", "fd-lm", "dynamic-fd", "ensemble", "elodi", "bcwi"] = "elodi"
    m: int = Field(8, ge=1, description="replicas in the ensemble (elodi, ensemble)")
    alpha: float | None = Field(None, ge=0, le=1, description="weight of the distillation term; None: method default")
    k: int = Field(10, ge=1, description="LDI: classes per sample")
    topk_by: Literal["teacher", "student", "union"] = "teacher"
    p: float = Field(2.0, gt=0)
    margin: float = Field(0.0, ge=0)
    legacy_weight: float | None = Field(None, ge=0, le=1, description="λ of ELODI Eq. 9; needs `old`")
    temperature: float | None = Field(None, gt=0)
    focal_alpha: float = Field(1.0, ge=0)
    focal_beta: float = Field(5.0, ge=0)
    distance: Literal["lm", "kl"] = "lm"
    bcwi_alphas: tuple[float, ...] = Field(tuple(i / 10 for i in range(11)), min_length=1)
    bcwi_er_tolerance: float = Field(0.005, ge=0, description="BCWI: allowed val ER above α = 0")

    @field_validator("bcwi_alphas")
    @classmethod
    def _alphas_in_range(cls, values: tuple[float, ...]) -> tuple[float, ...]:
        if any(not 0 <= a <= 1 for a in values):
            raise ValueError("every BCWI alpha must lie in [0, 1]")
        return values

    def objective(self) -> Objective:
        """The training objective of the deployed model (none for bcwi's fine-tuning)."""
        name = "none" if self.name in ("ensemble", "bcwi") else self.name
        return Objective(
            name, self.alpha, self.temperature, self.focal_alpha, self.focal_beta, self.distance,
            self.k, self.p, self.margin, self.topk_by, self.legacy_weight,
        )


class TrainSpec(_Strict):
    epochs: int = Field(10, ge=1)
    batch_size: int = Field(128, ge=1)
    lr: float = Field(0.1, gt=0)
    momentum: float = Field(0.9, ge=0, lt=1)
    weight_decay: float = Field(5e-4, ge=0)
    schedule: Literal["cosine", "step"] = "cosine"
    seed: int = Field(0, ge=0)
    augment: bool = True
    max_grad_norm: float | None = Field(5.0, gt=0)
    prefetch: int = Field(2, ge=1)

    def config(self, seed: int | None = None, threads: int = 1, device: str = "cpu") -> TrainConfig:
        fields = self.model_dump()
        fields["seed"] = self.seed if seed is None else seed
        return TrainConfig(**fields, threads=threads, device=device)


class WorkerResources(_Strict):
    cpus: float = Field(1.0, gt=0)
    gpus: float = Field(0.0, ge=0)


class ResourcesSpec(_Strict):
    replica: WorkerResources = WorkerResources()
    student: WorkerResources = WorkerResources()
    teacher: WorkerResources = WorkerResources(cpus=0.5)
    teacher_actors: int = Field(2, ge=1)


class PromoteSpec(_Strict):
    """The promotion gate: alias `champion` moves to the new version only if, against the current
    champion, NFR ≤ max_nfr and ER − ER_champion ≤ max_er_increase (fractions, not %)."""

    max_nfr: float = Field(ge=0, le=1)
    max_er_increase: float = Field(0.0, ge=-1, le=1)


TUNABLE = ("alpha", "k", "legacy_weight", "temperature", "lr")


class RangeSpec(_Strict):
    """A continuous range for random search: uniform, or log-uniform with `log: true`."""

    low: float
    high: float
    log: bool = False

    @model_validator(mode="after")
    def _ordered(self) -> "RangeSpec":
        if not self.low < self.high:
            raise ValueError("low must be below high")
        if self.log and self.low <= 0:
            raise ValueError("a log range needs low > 0")
        return self


class TuneSpec(_Strict):
    """A Ray Tune search over ELODI's settings; trials share the replicas and the teacher pool.

    space: {alpha | k | legacy_weight | temperature | lr: [values] or {low, high, log}}; grid search
    takes lists only (each combination `num_samples` times), random search draws `num_samples`
    trials (lists: uniform choice). The pick: lowest NFR among trials whose ER ≤ the no-treatment
    ER (the replicas' mean) + `er_tolerance`."""

    search: Literal["grid", "random"] = "grid"
    space: dict[Literal["alpha", "k", "legacy_weight", "temperature", "lr"], list[float] | RangeSpec]
    num_samples: int = Field(1, ge=1)
    scheduler: Literal["fifo", "asha"] = "fifo"
    er_tolerance: float = Field(0.005, ge=0)

    @model_validator(mode="after")
    def _valid_space(self) -> "TuneSpec":
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


class UpdateSpec(_Strict):
    model: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", max_length=128)
    version: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", max_length=64)
    data: DataSpec = DataSpec()
    arch: str
    method: MethodSpec = MethodSpec()
    old: str | None = None  # a checkpoint path, or a registry reference NAME@ALIAS / NAME/VERSION
    train: TrainSpec = TrainSpec()
    resources: ResourcesSpec = ResourcesSpec()
    storage: str = "runs"  # a local directory or s3://bucket/prefix
    promote: PromoteSpec | None = None
    tune: TuneSpec | None = None
    allow_user_factories: bool = False

    @model_validator(mode="after")
    def _consistent(self) -> "UpdateSpec":
        try:
            resolve_factory(self.arch, self.allow_user_factories)
        except ModelError as e:
            raise ValueError(f"arch: {e}") from None
        if self.old is None and (self.method.name in NEEDS_OLD or self.method.legacy_weight is not None):
            needs = "legacy_weight" if self.method.name not in NEEDS_OLD else f"method {self.method.name!r}"
            raise ValueError(f"old: {needs} needs an old model (a checkpoint path or NAME@ALIAS)")
        if self.method.legacy_weight is not None and self.method.name != "elodi":
            raise ValueError("method.legacy_weight: only elodi has a legacy term")
        if self.tune is not None:
            if self.method.name != "elodi":
                raise ValueError("tune: searches ELODI's settings, so method.name must be elodi")
            if self.old is None:
                raise ValueError("old: tune measures each trial's NFR against the old model; give one")
            if "legacy_weight" in self.tune.space and self.method.legacy_weight is None:
                raise ValueError("tune.space.legacy_weight: set method.legacy_weight to enable the legacy term")
        return self

    def with_absolute_paths(self, base: Path | None = None) -> "UpdateSpec":
        """Local paths (data.path, old, storage) made absolute, so workers on other nodes and in
        other directories read and write the same places."""
        base = base or Path.cwd()

        def absolute(value: str | None) -> str | None:
            if value is None or value.startswith("s3://"):
                return value
            return str((base / value).resolve())

        data = self.data.model_copy(update={"path": absolute(self.data.path)})
        return self.model_copy(update={"data": data, "old": absolute(self.old), "storage": absolute(self.storage)})

    @property
    def spec_hash(self) -> str:
        """sha256 of the canonical JSON of the spec; 12 hex digits."""
        canonical = json.dumps(self.model_dump(mode="json"), sort_keys=True)
        return hashlib.sha256(canonical.encode()).hexdigest()[:12]


_SHAPE_ERRORS = ("list_type", "model_type", "dict_type", "model_attributes_type", "float_type")


def _describe(error: ValidationError) -> str:
    """One line for the most specific problem: a union's member errors about the wrong shape give
    way to the one that says what is wrong inside; member tags (`list[float]`, `RangeSpec`) are
    dropped from the field path."""
    errors = error.errors()
    specific = [e for e in errors if e["type"] not in _SHAPE_ERRORS] or errors
    first = specific[0]
    parts = [str(p) for p in first["loc"] if not (isinstance(p, str) and ("[" in p or p[:1].isupper()))]
    location = ".".join(parts)
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        message = "unknown key"
    return f"{location}: {message}" if location else message


def parse_spec(document: object) -> UpdateSpec:
    """Validate a parsed YAML document; SpecError with one line on any problem."""
    if not isinstance(document, dict):
        raise SpecError("the spec must be a YAML mapping of fields")
    try:
        return UpdateSpec.model_validate(document)
    except ValidationError as e:
        raise SpecError(_describe(e)) from None


def load_spec(path: str | Path) -> UpdateSpec:
    """Read and validate a YAML spec file."""
    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(f"{path}: cannot read ({e.strerror if isinstance(e, OSError) else e})") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise SpecError(f"{path}: invalid YAML{where}") from None
    try:
        return parse_spec(document)
    except SpecError as e:
        raise SpecError(f"{path}: {e}") from None
