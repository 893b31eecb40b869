"""Preflight: every check a spec needs before any Ray work — the data (columns, classes, sizes), the
old checkpoint, registry references, where the models start, the storage — each problem found
reported at once, one line each, named by the field it concerns.

`check_spec(spec)` runs the checks alone (`congruent check`: no Ray, no training, no tokenizer
trained unless a check needs it); `preflight(spec)` runs the same checks and returns the `Plan`
(`congruent run`, `tune`, `demo`), with what the models read settled (the tokenizer trained).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from orchestrator.planning.model_inputs import (
    adapter_of,
    check_init_available,
    check_init_fits,
    directory_digest,
    file_digest,
    image_inputs,
    text_inputs,
)
from orchestrator.planning.plan import Plan, data_request
from orchestrator.tracking.version_refs import RegistryError, VersionRef
from pipelines.spec import SpecError, UpdateSpec
from workers import storage
from workers.data.input_spec import InputSpec
from workers.errors import problems_of
from workers.names import HF_PREFIX, is_hf, is_weights_file
from workers.tasks.records import DataRequest

T = TypeVar("T")


@dataclass
class Findings:
    """The problems found so far, one line each, each named by the spec field it concerns."""

    problems: list[str] = field(default_factory=list)

    def add(self, line: str) -> None:
        self.problems.append(line)

    def attempt(self, name: str, action: Callable[[], T], errors: tuple[type[BaseException], ...]) -> T | None:
        """`action()`, or None with its error's problems noted under `name` ("": they name their field)."""
        try:
            return action()
        except errors as e:
            self.problems += [f"{name}: {line}" if name else line for line in problems_of(e)]
            return None


def resolve_old(spec: UpdateSpec) -> tuple[UpdateSpec, VersionRef | None]:
    """Replace a registry reference in `old` by a local copy of that version's checkpoint."""
    from orchestrator.tracking import store
    from orchestrator.tracking.version_refs import parse_version_ref

    if spec.old is None or Path(spec.old).exists() or parse_version_ref(spec.old) is None:
        return spec, None
    database = store.embedded_database()
    if database is not None and not database.exists():  # the embedded store: nothing registered yet
        raise RegistryError(f"{spec.old}: no version is registered yet (no MLflow store at {database})")
    from orchestrator.tracking import registry  # MLflow, only where a store exists to ask

    store.configure()
    parent = registry.resolve(spec.old)
    return spec.model_copy(update={"old": registry.checkpoint_of(parent)}), parent


def as_written(message: str, paths: tuple[str, ...], written: str | None) -> str:
    """`message` with the paths the driver used for `old` (a registry version's temporary copy, an
    absolute path) replaced by what the spec said."""
    for path in sorted({p for p in paths if p}, key=len, reverse=True):
        message = message.replace(path, written or path)
    return message


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
class Inspection:
    """What the checks of one spec found: its problems, and what they learned on the way."""

    problems: list[str]
    plan: Plan | None = None  # when the inputs were settled and nothing was wrong
    shape: Shape | None = None  # of the version it registers, when its data could be read
    summary: str = ""  # what it will run, when nothing was wrong


def check_spec(spec: UpdateSpec, upcoming: dict[str, Shape] | None = None) -> Inspection:
    """Every check of `preflight`, without settling what the models read where no check needs it
    (a text version's tokenizer is trained only to check `init` weights against it). `upcoming`:
    the versions specs checked before this one will register, by `MODEL@ALIAS` — an `old` naming
    one is checked against that spec instead of the registry."""
    return _inspect(spec, settle_inputs=False, upcoming=upcoming or {})


def preflight(spec: UpdateSpec) -> Plan:
    """Every check that needs the data, the old checkpoint, the registry or the storage, before any
    Ray work — SpecError listing every problem found, one line each, when the spec cannot run —
    and the Plan of a spec that can."""
    inspection = _inspect(spec, settle_inputs=True, upcoming={})
    if inspection.problems:
        raise SpecError(*inspection.problems)
    assert inspection.plan is not None
    return inspection.plan


def _inspect(spec: UpdateSpec, settle_inputs: bool, upcoming: dict[str, Shape]) -> Inspection:
    from orchestrator.tracking.version_refs import parse_version_ref
    from workers.data import DataError
    from workers.models.architectures import ModelError, resolve_factory
    from workers.models.checkpoints import CheckpointError, classes_seen_of, load_model
    from workers.tasks.resolve import cached_splits, content_key

    found = Findings()
    written = spec.old  # what the user wrote: problems name it, not a temporary copy or an absolute path
    reference = parse_version_ref(spec.old) if spec.old is not None and not Path(spec.old).exists() else None
    old: Any = None  # the old model's settings (or the Shape of a version an earlier spec registers)
    parent = None
    alias = None if reference is None else f"{reference[0]}@{reference[1]}"
    if alias in upcoming:
        old, spec = upcoming[alias], spec.model_copy(update={"old": None})
    else:
        resolved = found.attempt("old", lambda: resolve_old(spec), (RegistryError,))
        if resolved is None:  # an unresolved reference: the checks that need the old model are skipped
            spec = spec.model_copy(update={"old": None})
        else:
            spec, parent = resolved
    spec = spec.with_absolute_paths()
    # a user factory imports here, not in a worker
    found.attempt("arch", lambda: resolve_factory(spec.arch, spec.allow_user_factories), (ModelError,))
    from orchestrator.planning.streaming import (
        in_memory_holders,
        in_process_teachers_on_a_stream,
        settle_streaming,
        stream_problems,
    )

    def settled() -> DataRequest:  # streaming decided; a streamed source opened (its files listed, scanned)
        try:
            return settle_streaming(data_request(spec), in_memory_holders(spec))
        except DataError as e:
            raise SpecError(*(f"data: {line}" for line in problems_of(e))) from None

    request = found.attempt("", settled, (SpecError,))
    splits = None
    if request is not None:
        splits = found.attempt("data", lambda: cached_splits(request), (DataError,))
        spec = in_process_teachers_on_a_stream(spec, request)
        for line in stream_problems(spec, request):
            found.add(line)
    old_classes = None
    init_key = None if spec.init is None or spec.init == "old" else spec.init
    if spec.old is not None:
        local = spec.old
        try:  # the weights are loaded too: a checkpoint of another architecture fails here, not in a worker
            local = storage.fetch_checkpoint(spec.old)
            _, old = load_model(local, spec.allow_user_factories)
            if spec.init == "old":
                init_key = file_digest(local)
            seen = classes_seen_of(local)
            old_classes = None if seen is None else tuple(seen)
        except (CheckpointError, FileNotFoundError, ModelError) as e:
            found.add(f"old: {as_written(str(e), (local, spec.old), written)}")
    if old is not None and splits is not None:
        if old_classes is not None and set(old_classes) >= set(range(splits.num_classes)):
            old_classes = None  # it knows every class: NFR counts every sample
        _compare_old(found, written, _shape_of(old), splits)
    inputs = None  # what the new models read: a tokenizer, or the images' normalisation
    if old is not None:
        if spec.method.name == "bcwi" and old.arch != spec.arch:
            found.add(f"method: bcwi interpolates weights, so arch must equal the old model's ({old.arch!r})")
        if spec.init == "old" and old.arch != spec.arch:
            found.add(f"init: old starts from the old model's weights, so arch must be {old.arch!r}")
        if (spec.method.name == "bcwi" or spec.init == "old") and getattr(old, "adapter", None) != adapter_of(spec):
            found.add(
                f"train.adapter: {'bcwi interpolates' if spec.method.name == 'bcwi' else 'init: old starts from'} the "
                f"old model's weights, so the adapter must be the old model's ({_adapter_text(old)})"
            )
        if (spec.method.name == "bcwi" or spec.init == "old") and not isinstance(old, Shape):
            inputs = old.inputs  # starting from the old weights keeps what they read: tokenizer, normalisation
    before = len(found.problems)
    found.attempt("", lambda: check_init_available(spec), (SpecError,))
    init_readable = len(found.problems) == before
    if spec.init is not None and is_weights_file(spec.init) and init_readable:
        init_key = file_digest(spec.init)  # the same path with other weights in it trains new replicas
    checks_init = spec.init is not None and spec.init != "old" and init_readable
    checks_model = checks_init or (spec.train.adapter is not None and init_readable)  # the adapter's targets
    if splits is not None and inputs is None and init_readable and (settle_inputs or checks_model):
        inputs = found.attempt("", lambda: _inputs(spec, splits), (SpecError,))
    if splits is not None and checks_model and (inputs is not None or splits.modality == "image"):
        reads = inputs or InputSpec.image(splits.in_channels, splits.image_size)
        found.attempt("", lambda: check_init_fits(spec, splits.num_classes, reads), (SpecError,))
    if parent is not None and splits is not None:
        from orchestrator.tracking.registry import check_shared_eval

        eval_ids = splits.eval.ids.numpy()  # the old version's ledger must hold enough of them
        found.attempt("", lambda: check_shared_eval(parent, eval_ids, splits.fingerprint), (RegistryError,))
    found.attempt("storage", lambda: storage.check_writable(spec.storage), (storage.StorageError,))
    shape = None
    if splits is not None:
        image = splits.modality == "image"
        channels, size = (splits.in_channels, splits.image_size) if image else (0, 0)
        shape = Shape(spec.arch, splits.num_classes, splits.modality, channels, size)
    if found.problems or splits is None or request is None:
        return Inspection(found.problems, shape=shape)
    summary = _summary(spec, splits, written, len(request.streamed.skipped) if request.streamed else 0)
    if not settle_inputs:
        return Inspection([], shape=shape, summary=summary)
    plan = Plan(
        spec=spec,
        parent=parent,
        data=request,
        content_key=content_key(request),
        eval_fingerprint=splits.fingerprint,
        num_classes=splits.num_classes,
        old_as_written=written,
        old_classes=old_classes,
        inputs=inputs,
        init_key=init_key,
        arch_key=directory_digest(spec.arch.removeprefix(HF_PREFIX)) if is_hf(spec.arch) else None,
        class_names=tuple(splits.train.classes),
        eval_labels=splits.eval.labels.numpy(),
        train_split=splits.distillation_split if spec.method.name == "elodi" else splits.train,
        unlabelled=None if splits.unlabelled is None else (len(splits.unlabelled), splits.unlabelled_dropped),
    )
    return Inspection([], plan, shape, summary)


def _adapter_text(old: Any) -> str:
    adapter = getattr(old, "adapter", None)
    return "none" if adapter is None else adapter.summary


def _shape_of(old: Any) -> Shape:
    """The Shape of an old model's settings (or the Shape itself)."""
    if isinstance(old, Shape):
        return old
    reads = old.inputs
    return Shape(old.arch, old.num_classes, reads.modality, reads.channels, reads.size)


def _summary(spec: UpdateSpec, splits: Any, written: str | None, skipped: int = 0) -> str:
    """One line: what the spec will train, on what (and how many corrupt files it leaves out), from
    which old version."""
    method = spec.method.name + (f" (m {spec.method.m})" if spec.method.name in ("elodi", "ensemble") else "")
    sizes = f"{len(splits.train):,} train / {len(splits.val):,} val / {len(splits.eval):,} eval"
    old = f"old {written}" if written else "no old version (a first version)"
    data = f"{sizes} {splits.modality} samples, {splits.num_classes} classes"
    if skipped:
        data += f" ({skipped:,} corrupt file{'s' if skipped > 1 else ''} left out)"
    if splits.unlabelled is not None:
        data += f", and {len(splits.unlabelled):,} unlabelled texts ({splits.unlabelled_dropped:,} left out)"
    return f"{spec.model} {spec.version}: {method}, {spec.arch}; {data}; {old}"


def _inputs(spec: UpdateSpec, splits: Any) -> InputSpec | None:
    """What the version's new models read: its tokenizer (trained here) or its images' normalisation."""
    return text_inputs(spec, splits.train) if splits.modality == "text" else image_inputs(spec, splits.train)


def _compare_old(found: Findings, written: str | None, old: Shape, splits: Any) -> None:
    """The old model against the data: its class count, what it reads, the images' shape."""
    if old.num_classes != splits.num_classes:
        found.add(f"old: {written} has {old.num_classes} classes, the data has {splits.num_classes}")
    if old.modality != splits.modality:
        found.add(f"old: {written} reads {old.modality}, the data is {splits.modality}")
    elif splits.modality == "image" and (old.channels, old.size) != (splits.in_channels, splits.image_size):
        found.add(
            f"old: {written} takes {old.channels}×{old.size}² images, the data has "
            f"{splits.in_channels}×{splits.image_size}²"
        )
