"""What preflight's checks find: one fact type per check, `Problems` when a check finds something
wrong instead, and `Found`, the spec with every fact found so far — what each check reads. Types and
pure helpers only; every check module imports this one and no other check."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

from pipelines.auto import AutoChoice
from pipelines.spec import UpdateSpec

if TYPE_CHECKING:
    from orchestrator.tracking.foreign_models import ForeignModel
    from orchestrator.tracking.version_refs import VersionRef
    from workers.data.dataset_splits import DataSplits
    from workers.data.input_spec import InputSpec
    from workers.data.protected_rows import ProtectedRows
    from workers.models.checkpoints import ModelSettings
    from workers.tasks.records import DataRequest

F = TypeVar("F")


@dataclass(frozen=True)
class Problems:
    """What a check found wrong, one line each, each named by the spec field it concerns."""

    lines: tuple[str, ...]

    @classmethod
    def of(cls, field_name: str, lines: list[str] | tuple[str, ...]) -> Problems:
        """`lines` each under `field_name` ("": they name their field already)."""
        return cls(tuple(f"{field_name}: {line}" if field_name else line for line in lines))


@dataclass(frozen=True)
class Shape:
    """What a later spec's `old` needs to know of a version another spec of the same check will
    register: its architecture, class count and what it reads."""

    arch: str
    num_classes: int
    modality: str
    channels: int = 0
    size: int = 0


@dataclass(frozen=True)
class OldVersion:
    """What `old` names. `checkpoint`: the checkpoint to load (a registry version's local copy, or the
    path as written); None when an earlier spec of the same check registers the version (`upcoming`)."""

    written: str  # as the spec says it: problems name this, not a temporary copy or an absolute path
    checkpoint: str | None
    parent: VersionRef | None = None  # the registry version `old` resolved to
    upcoming: Shape | None = None
    foreign: ForeignModel | None = None  # an MLflow model Congruent did not train (checkpoint: OldAnswers')


@dataclass(frozen=True)
class OldAnswers:
    """A foreign old model's answers as the run reads them: `checkpoint`, where its answer table on
    every text of the splits is (workers/models/answer_table.py; the old-answers stage writes it when
    absent: its name is the model's resolved URI and the texts' digest), the input `column` its pyfunc
    reads, and the data's class ids it answers probabilities of (None: all of them)."""

    checkpoint: str
    column: str
    classes: tuple[int, ...] | None


@dataclass(frozen=True)
class Architecture:
    """`arch` resolves to a model factory (a user factory imported in the driver)."""

    arch: str


@dataclass(frozen=True)
class Source:
    """The spec's data source as the workers read it: `request`, with streaming settled (true or
    false) and a streamed source opened (its files listed, a sample decoded, its labels scanned)."""

    request: DataRequest


@dataclass(frozen=True)
class ProtectedTraining:
    """`train.protected_weight`: the model's protected set, as the rows that join the train split."""

    rows: ProtectedRows


@dataclass(frozen=True)
class Data:
    """The source's train, val and regression-eval splits (held in memory, or streamed)."""

    splits: DataSplits

    def shape(self, arch: str) -> Shape:
        """The Shape of a version of `arch` trained on these splits."""
        splits = self.splits
        if splits.modality == "image":
            return Shape(arch, splits.num_classes, "image", splits.in_channels, splits.image_size)
        return Shape(arch, splits.num_classes, splits.modality)


@dataclass(frozen=True)
class StreamSupport:
    """What the spec asks of its data's reading, a streamed source supports (or the data is held)."""


@dataclass(frozen=True)
class OldModel:
    """The old model as its checkpoint says (or, for an upcoming version, as its spec will make it)."""

    shape: Shape
    settings: ModelSettings | None = None  # None: an upcoming version, not a checkpoint yet
    classes: tuple[int, ...] | None = None  # the classes it was trained on, when it names them
    digest: str | None = None  # sha256 of its checkpoint file: what `init: old` starts from
    foreign: str | None = None  # a model outside Congruent: its resolved URI (its answers only, no weights)

    @property
    def adapter(self) -> Any:
        return None if self.settings is None else self.settings.adapter


@dataclass(frozen=True)
class OldFit:
    """The old model fits the data and the method; `classes`: the classes it knows when it knows
    fewer than the data has (None: every class, so NFR counts every sample)."""

    classes: tuple[int, ...] | None


@dataclass(frozen=True)
class InitFile:
    """`init`'s weights can be read here; `key` names them: a weights name, the sha256 of a file,
    None without `init` (or with `init: old`, whose key is the old checkpoint's digest)."""

    key: str | None


@dataclass(frozen=True)
class ModelInputs:
    """What the version's new models read: a tokenizer, the images' normalisation (None: the fixed
    map of images to [−1, 1])."""

    inputs: InputSpec | None


@dataclass(frozen=True)
class InitFit:
    """`init`'s weights and `train.adapter`'s targets fit the version's model (or nothing to fit)."""


@dataclass(frozen=True)
class AutoCandidates:
    """`method: auto`: what it trains and leaves out; `bcwi_inputs`: what the models of bcwi and
    proximal read (the old model's inputs: they start from the old weights)."""

    choice: AutoChoice
    bcwi_inputs: InputSpec | None = None
    folds: FoldPlan | None = None  # method.cross_fit on these splits (None: off)


@dataclass(frozen=True)
class FoldPlan:
    """auto's cross-fitting as planned: `trained` of `folds` folds of `labelled` samples (train ∪ val);
    `conditional`: cross_fit auto, which cross-fits only when no treatment trains fast enough
    (auto_folds.py)."""

    trained: int
    folds: int
    conditional: bool
    labelled: int


@dataclass(frozen=True)
class SharedEval:
    """The old registry version was evaluated on `samples` of this spec's eval samples (0: it has no
    ledger, and its recorded eval split is this one)."""

    samples: int


@dataclass(frozen=True)
class Slices:
    """The slice columns each eval sample's ledger row will hold (`data.slice_columns`, then the
    columns of `data.slices`)."""

    columns: tuple[str, ...]


@dataclass(frozen=True)
class Storage:
    """`storage` can be written (a probe file written and removed; on S3 the bucket answers)."""

    uri: str


@dataclass(frozen=True)
class Found:
    """A spec and the facts its checks found so far, with the problems of those that found none.
    `settle_inputs`: settle what the models read even where no check needs it (`preflight`, not
    `congruent check`); `upcoming`: the versions specs checked before this one register, by
    `MODEL@ALIAS`."""

    spec: UpdateSpec
    settle_inputs: bool = True
    upcoming: Mapping[str, Shape] = field(default_factory=dict)
    facts: Mapping[type, Any] = field(default_factory=dict)
    problems: tuple[str, ...] = ()

    def get(self, kind: type[F]) -> F | None:
        """The fact of that kind, None when its check found problems or has not run."""
        return self.facts.get(kind)

    def after(self, outcome: object) -> Found:
        """These facts with what one check found: its fact, or its problems."""
        if isinstance(outcome, Problems):
            return replace(self, problems=self.problems + outcome.lines)
        return replace(self, facts={**self.facts, type(outcome): outcome})

    @property
    def request(self) -> DataRequest | None:
        """What the workers read: the Source's request, with the protected rows that join train
        (ProtectedTraining); None before a source was opened."""
        source = self.get(Source)
        if source is None:
            return None
        protected = self.get(ProtectedTraining)
        return source.request if protected is None else replace(source.request, protected=protected.rows)

    @cached_property
    def settled(self) -> UpdateSpec:
        """The spec as the run will have it: `old` as the checkpoint found (a foreign model's: its
        answer table; None when it names no checkpoint to load), local paths absolute, and on a
        streamed source the teachers in the student's task (`resources.teacher_actors: 0`) unless the
        spec set teacher_actors itself (then the pool's actors take the streamed batches;
        docs/benchmarks/streaming.md, "Teachers on a stream", measures both)."""
        old, answers = self.get(OldVersion), self.get(OldAnswers)
        checkpoint = answers.checkpoint if answers is not None else None if old is None else old.checkpoint
        spec = self.spec.model_copy(update={"old": checkpoint})
        spec = spec.with_absolute_paths()
        source = self.get(Source)
        if source is None or source.request.streamed is None or "teacher_actors" in spec.resources.model_fields_set:
            return spec
        return spec.model_copy(update={"resources": spec.resources.model_copy(update={"teacher_actors": 0})})


# A check: the facts found so far → its fact, its problems, or None when it has nothing to check
# (the spec does not ask for it, or a fact it needs was not found).
Check = Callable[[Found], object]
