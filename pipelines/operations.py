"""The spec's sections on how a version runs and ships: Ray resources per stage, the promotion gate,
and the Ray Tune search (pipelines/spec.py composes them; pipelines/sections.py and data_section.py hold the others)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    Field,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)

from pipelines.sections import _Strict


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
    fresh_stage_workers: bool = Field(
        True,
        description="each stage task (a replica, the student, BCWI, the evaluation) runs in a worker process that "
        "exits with it, so a finished stage's memory goes back at once; false: an idle worker takes the next "
        "stage, which saves each stage's start (seconds: a process and its imports) on small updates",
    )


class PromoteSpec(_Strict):
    """The promotion gate: alias `champion` moves to the new version only if, against the current
    champion, NFR ≤ max_nfr and ER − ER_champion ≤ max_er_increase (fractions, not %); with
    `confidence`, their one-sided upper bounds at that level (Wilson for NFR, paired Tango score bound
    for the ER increase) must be within the limits, so noise on a small eval split cannot pass.

    The one gate of every promotion: a spec's `promote`, and `congruent promote`'s and `congruent serve
    --canary`'s flags, which are built from these fields and validated by `model_validate`."""

    max_nfr: float = Field(
        ge=0,
        le=1,
        description="largest NFR against the champion, a fraction (0.02 = 2 %); its upper bound with confidence",
    )
    max_er_increase: float = Field(
        0.0, ge=-1, le=1, description="largest ER increase over the champion, a fraction (0.01 = 1 pt)"
    )
    confidence: float | None = Field(
        None,
        ge=0.5,
        lt=1,
        description="gate on the one-sided upper bounds at this level (e.g. 0.95): Wilson for NFR, paired "
        "(Tango's score bound) for the ER increase; none: the point values",
    )
    min_live: int | None = Field(
        None,
        ge=1,
        description="labelled live pairs a live gate asks for (`promote --live`, a `serve --canary`; a run's own "
        "promotion has no live traffic); none: the fewest whose Wilson bound, at confidence or 95 %, can be "
        "within max_nfr (268 for 1 %)",
    )
    max_slice_nfr: float | None = Field(
        None,
        ge=0,
        le=1,
        description="every slice (data.slice_columns, data.slices) of at least min_slice_n eval samples must keep "
        "its NFR within this (its upper bound with confidence); refused naming the slice",
    )
    min_slice_n: int = Field(30, ge=1, description="eval samples a slice needs before max_slice_nfr gates it")
    max_protected_flips: int = Field(
        0,
        ge=0,
        description="samples of the model's protected set (`congruent protect`) the champion gets right that the "
        "new version may get wrong",
    )

    @field_validator("max_nfr", "max_er_increase", "max_slice_nfr", mode="wrap")
    @classmethod
    def _a_fraction(cls, value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo) -> Any:
        """A limit out of its range is said as the fraction it must be (5 is 500 %, not 5 %), in the
        words of the spec and of `promote`'s and `serve`'s flags alike."""
        try:
            return handler(value)
        except ValidationError as e:
            if e.errors()[0]["type"] not in ("greater_than_equal", "less_than_equal"):
                raise
            low = -1 if info.field_name == "max_er_increase" else 0
            raise ValueError(f"must be a fraction in [{low}, 1] (0.05 = 5%), got {value}") from None


def gate_flag(field: str) -> str:
    """A gate field's command-line flag (`promote`, `serve --canary`): max_nfr → --max-nfr."""
    return "--" + field.replace("_", "-")


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
