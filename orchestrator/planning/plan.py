"""The plan: a checked spec turned into the workers' own records — `DataRequest`, `TrainConfig`
(its `auto` values resolved), `Objective`, the replicas' and the student's `TrainJob`s — and what
execution needs of the data (class names, eval labels, the training split), so no stage decides
again. preflight.py checks a spec and makes its `Plan`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from orchestrator.planning.resources import device, threads
from orchestrator.tracking.version_refs import VersionRef
from pipelines.auto import AUTO_ONLY_FIELDS, AutoCandidate, AutoChoice, auto_choice
from pipelines.defaults import recipe_for
from pipelines.spec import MethodSpec, UpdateSpec, WorkerResources
from workers import storage
from workers.data.input_spec import InputSpec
from workers.data.split_port import Split
from workers.models.adapters import LoraSettings
from workers.names import REPLICA_METHODS, STARTS_FROM_OLD
from workers.tasks.records import DataRequest, TrainJob
from workers.training.config import TrainConfig
from workers.training.objectives import Objective
from workers.training.perturb import DistillInputs


def data_request(spec: UpdateSpec) -> DataRequest:
    """The spec's `data` section as the workers' record: every field by name, `dataset`/`path` as
    `source`, but the slices (read by the driver when it writes the ledger, never by a worker)."""
    excluded = {"dataset", "path", "slice_columns", "slices"}
    return DataRequest(source=spec.data.source, kind=spec.data.kind, **spec.data.model_dump(exclude=excluded))


def adapter_of(spec: UpdateSpec) -> LoraSettings | None:
    """The spec's `train.adapter` as the workers build it (None: the whole model trains)."""
    adapter = spec.train.adapter
    return None if adapter is None else LoraSettings.from_record(adapter.model_dump())


# MethodSpec fields that are not the objective's: `name` (the objective's method, below), `m` (the
# replica count, Plan.replica_jobs), BCWI's α sweep (Plan.bcwi_sweep) and auto's (Plan.auto)
NOT_OBJECTIVE_FIELDS = {"name", "m", "bcwi_alphas", "bcwi_er_tolerance", *AUTO_ONLY_FIELDS}


def objective_of(method: MethodSpec) -> Objective:
    """The training objective of the deployed model (plain CE for bcwi's fine-tuning and the
    ensemble): every other field of the spec's `method` section passed by name."""
    assert method.name != "auto", "auto trains its candidates' objectives (Plan.candidate)"
    name = "none" if method.name in ("ensemble", "bcwi") else method.name
    return Objective(name, **method.model_dump(exclude=NOT_OBJECTIVE_FIELDS))


def resolved_flip(spec: UpdateSpec) -> bool:
    """`train.flip` with auto resolved: on for the built-in Fashion-MNIST, whose mirrored garments
    keep their class, and for photos at `data.image_size` (random-resized crops and flips, the usual
    pair); off for other `data.path` images, where a mirrored digit or letter may change its meaning."""
    flip = spec.train.flip
    if flip == "auto":
        return spec.data.path is None or spec.data.image_size is not None
    return bool(flip)


def warmup_epochs(spec: UpdateSpec, student: bool) -> float:
    """`train.warmup_epochs`; auto: the architecture's own (its recipe, pipelines/defaults.py), and
    for a student trained with LDI (elodi) at least 1 epoch, or a tenth of the run if shorter."""
    if spec.train.warmup_epochs != "auto":
        return spec.train.warmup_epochs
    own = recipe_for(spec.arch, spec.train.adapter is not None).warmup_epochs
    epochs = (spec.train.student_epochs or spec.train.epochs) if student else spec.train.epochs
    if student and spec.method.name == "elodi":
        own = max(own, min(1.0, epochs / 10))
    return min(own, float(epochs))


def applied_params(spec: UpdateSpec) -> dict[str, str]:
    """What the spec's `auto` settings resolved to, as MLflow params: `augment.crop`, `augment.flip`,
    `warmup.student_epochs`. (Each training's nested run has the whole TrainConfig it ran with.)"""
    crop, flip = train_config(spec, spec.train.seed, spec.resources.student, student=True).augmentation
    return {
        "augment.crop": str(crop),
        "augment.flip": str(flip).lower(),
        "warmup.student_epochs": f"{warmup_epochs(spec, student=True):g}",
    }


def train_config(
    spec: UpdateSpec, seed: int, resources: WorkerResources, student: bool = False, fp32: bool = False
) -> TrainConfig:
    """The spec's `train` section for a model of seed `seed` trained with `resources` (`student`: the
    deployed model's training, whose objective is the method's): every field by name, its `auto`
    values resolved (augmentation is off for text), plus where the task computes (threads, device);
    `fp32`: whatever the spec's precision (packed replicas)."""
    values = spec.train.model_dump()
    student_epochs = values.pop("student_epochs")
    values.pop("protected_weight")  # the data's: the protected rows join the train split (DataRequest.protected)
    if student and student_epochs is not None:
        values["epochs"] = student_epochs
    values.update(seed=seed, warmup_epochs=warmup_epochs(spec, student), flip=resolved_flip(spec))
    if values["crop"] == "auto":  # random-resized crops for images at a chosen size, else a 2-pixel shift
        values["crop"] = "resized" if spec.data.image_size is not None else 2
    values["augment"] = values["augment"] and spec.data.kind == "image"  # crop and flip are for images
    if fp32:
        values["precision"] = "fp32"
    values["adapter"] = adapter_of(spec)
    perturb = values["distill_inputs"]
    values["distill_inputs"] = None if perturb is None else DistillInputs(**perturb)
    return TrainConfig(**values, threads=threads(resources.cpus), device=device(resources.gpus))


@dataclass(frozen=True)
class Demand:
    """What a spec's pipeline asks of the cluster: replica tasks, a student, teacher actors."""

    replicas: bool
    student: bool
    pool_actors: int  # 0 without a pool: nothing to serve, or in-process teachers


def cluster_demand(spec: UpdateSpec) -> Demand:
    """The stages a spec's method runs, from the spec alone (so `congruent check` needs no plan); auto
    asks for the replicas' resources when its budget allows an elodi candidate."""
    if spec.method.name == "auto":  # its students distil from the old model (kd, fd-lm) from one pool
        return Demand(auto_choice(spec.method).replicas, True, spec.resources.teacher_actors)
    replicas = spec.method.name in REPLICA_METHODS
    serves = replicas or "old" in objective_of(spec.method).references
    return Demand(replicas, spec.method.name != "ensemble", spec.resources.teacher_actors if serves else 0)


@dataclass(frozen=True)
class PlannedSplits:
    """What execution needs of the splits, read once by preflight so no stage goes back to them."""

    content_key: str  # the train, val and eval splits' content (workers.tasks.resolve.content_key): names checkpoints
    eval_fingerprint: str  # the regression-eval split's (DataSplits.fingerprint): versions compare on it
    num_classes: int
    class_names: tuple[str, ...] = ()  # the training split's classes, in class-id order
    eval_labels: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64), compare=False, repr=False)
    # the training split itself (an elodi student's: followed by data.unlabelled's texts), held by the driver (the
    # teacher pool puts it in the object store); a Plan sent to a Ray worker (Tune's trials) travels without it:
    # workers read splits by the plan's `data`
    train_split: Split | None = field(default=None, compare=False, repr=False)
    unlabelled: tuple[int, int] | None = None  # data.unlabelled: (texts the student distils on, rows left out)
    protected: tuple[int, int] | None = None  # train.protected_weight: (samples that join train, left out of it)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "train_split": None}


@dataclass(frozen=True)
class ForeignOld:
    """An old model Congruent did not train: its resolved MLflow URI, the input column its pyfunc
    reads, and the data's class names its answers are matched to (the answer table, `spec.old`, is
    written by the old-answers stage from these)."""

    uri: str
    column: str
    classes: tuple[str, ...]


@dataclass(frozen=True)
class PlannedOld:
    """The old version: the registry version `old` resolved to (None: a checkpoint path, or no old),
    `old` as the spec wrote it, and the old model's classes when it knows fewer than the data has."""

    parent: VersionRef | None = None
    written: str | None = None  # a path, NAME@ALIAS, NAME/VERSION
    classes: tuple[int, ...] | None = None
    inputs: InputSpec | None = None  # method auto: what the old model reads (its bcwi and proximal candidates')
    foreign: ForeignOld | None = None  # a model outside Congruent (then `parent` is None)


@dataclass(frozen=True)
class ModelStart:
    """What the version's models read and start from, and what names those in checkpoint keys."""

    inputs: InputSpec | None = None  # text: the tokenizer; images: their normalisation (None: the fixed map)
    init_key: str | None = None  # what `init` starts from: a weights name, or the sha256 of the file it reads
    arch_key: str | None = None  # `arch: hf:DIR`: the sha256 of the directory's files (its weights and tokenizer)


@dataclass(frozen=True)
class Plan:
    """A checked spec and what follows from it (preflight.py builds it from what its checks found).
    `spec` has absolute paths and `old` as a checkpoint URI (a registry reference resolved to a local
    copy); `data` is the spec's data section as the workers' record, its streaming settled."""

    spec: UpdateSpec
    data: DataRequest
    splits: PlannedSplits
    old: PlannedOld = field(default_factory=PlannedOld)
    start: ModelStart = field(default_factory=ModelStart)
    auto: AutoChoice | None = None  # method auto: the candidates it trains
    cross_fit: tuple[int, int] = (0, 0)  # method auto: (J, K), the J of K folds it may train ((0, 0): none)

    @property
    def method(self) -> str:
        return self.spec.method.name

    def candidate(self, candidate: AutoCandidate) -> Plan:
        """The plan of one of auto's candidates: the spec with the candidate's method section (its
        checkpoints are those of a spec naming that method), bcwi and proximal, which start from the old
        weights, reading what the old model reads."""
        start = replace(self.start, inputs=self.old.inputs) if candidate.method.name in STARTS_FROM_OLD else self.start
        spec = self.spec.model_copy(update={"method": candidate.method})
        return replace(self, spec=spec, start=start, auto=None, cross_fit=(0, 0))

    @property
    def objective(self) -> Objective:
        return objective_of(self.spec.method)

    @property
    def needs_replicas(self) -> bool:
        return cluster_demand(self.spec).replicas

    @property
    def needs_student(self) -> bool:
        return cluster_demand(self.spec).student

    def teacher_groups(self, replica_checkpoints: list[str]) -> dict[str, list[str]]:
        """The checkpoints the teachers serve: "teacher" (the replicas), "old" when the objective
        reads it. Empty: nothing to serve."""
        groups = {}
        if replica_checkpoints:
            groups["teacher"] = list(replica_checkpoints)
        if "old" in self.objective.references:
            assert self.spec.old is not None  # the spec's validator requires old for an objective that reads it
            groups["old"] = [self.spec.old]
        return groups

    @property
    def pool_actors(self) -> int:
        """Teacher actors the pipeline starts (0 without a pool: nothing to serve, or in-process teachers)."""
        return cluster_demand(self.spec).pool_actors

    def replica_jobs(self) -> list[TrainJob]:
        """m replicas of the new architecture, seeds train.seed + 1 … train.seed + m; their
        checkpoints are keyed by data, architecture and training settings, not by the method, so
        every method and rerun with the same inputs reuses them."""
        spec = self.spec
        parts = {
            "data": spec.data.model_dump(mode="json"),
            "arch": spec.arch,
            "train": spec.train.model_dump(mode="json", exclude={"student_epochs"}),  # the replicas' settings
            "content": self.splits.content_key,
            **({"init": self.start.init_key} if self.start.init_key is not None else {}),
            **({"arch_content": self.start.arch_key} if self.start.arch_key is not None else {}),
            # what the models read: the images' normalisation, or the trained tokenizer itself (its JSON)
            **({"inputs": asdict(self.start.inputs)} if self.start.inputs is not None else {}),
        }
        key = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:12]
        base = storage.join(spec.storage, spec.model, "replicas", key)
        packed = spec.resources.replica.pack > 1  # packed replicas train fp32 (workers/training/packed.py)
        return [
            TrainJob(
                name=f"replica-{i}",
                data=self.data,
                arch=spec.arch,
                config=train_config(spec, spec.train.seed + 1 + i, spec.resources.replica, fp32=packed),
                checkpoint_uri=storage.join(base, f"replica-{i}.pt"),
                allow_user_factories=spec.allow_user_factories,
                nfr_reference=spec.old,
                inputs=self.start.inputs,
                init=None if spec.init == "old" else spec.init,
                init_from=spec.old if spec.init == "old" else None,
            )
            for i in range(spec.method.m)
        ]

    @property
    def data_parallel(self) -> bool:
        """A stage runs on several Ray Train workers (resources.replica/student.workers > 1)."""
        r = self.spec.resources
        return (self.needs_replicas and r.replica.workers > 1) or (self.needs_student and r.student.workers > 1)

    @property
    def teachers_in_process(self) -> bool:
        """teacher_actors 0: the student's task runs its teachers itself, on its device."""
        return self.spec.resources.teacher_actors == 0

    def student_job(
        self,
        checkpoint_name: str = "model.pt",
        spec: UpdateSpec | None = None,
        teachers: dict[str, list[str]] | None = None,
    ) -> TrainJob:
        """The deployed model's training: the spec's objective (or `spec`'s: a Tune trial), the
        student's resources, a checkpoint keyed by spec hash and data content; `teachers`
        (checkpoints per reference name) run in the student's own process. bcwi and proximal (and
        `init: old`) start from the old checkpoint's weights (`init_from`)."""
        spec = spec or self.spec
        return TrainJob(
            name="student",
            data=self.data,
            arch=spec.arch,
            config=train_config(spec, spec.train.seed, spec.resources.student, student=True),
            checkpoint_uri=storage.join(
                spec.storage,
                spec.model,
                spec.version,
                f"{spec.spec_hash}-{self.splits.content_key[:8]}",
                checkpoint_name,
            ),
            objective=objective_of(spec.method),
            init_from=spec.old if spec.method.name in STARTS_FROM_OLD or spec.init == "old" else None,
            init=None if spec.init == "old" else spec.init,
            allow_user_factories=spec.allow_user_factories,
            nfr_reference=spec.old,
            teachers=tuple((name, tuple(uris)) for name, uris in (teachers or {}).items()),
            inputs=self.start.inputs,
        )

    @property
    def bcwi_sweep(self) -> tuple[tuple[float, ...], float]:
        """BCWI's α values tried on the val split and the val ER tolerance of the pick."""
        return self.spec.method.bcwi_alphas, self.spec.method.bcwi_er_tolerance

    def bcwi_checkpoint(self) -> str:
        spec = self.spec
        folder = f"{spec.spec_hash}-{self.splits.content_key[:8]}"  # a cross-fitting fold's apart (auto_folds.py)
        return storage.join(spec.storage, spec.model, spec.version, folder, "model-bcwi.pt")


def pool_topk(objective: Objective, num_classes: int) -> dict[str, int]:
    """Groups the pool sends as top-K only: the ensemble, when LDI selects classes by the teacher."""
    compact = objective.method == "elodi" and objective.topk_by == "teacher" and objective.k < num_classes
    return {"teacher": objective.k} if compact else {}
