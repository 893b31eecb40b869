"""The models `congruent predict` scores (orchestrator/driver/predict.py): a version Congruent
registered (its checkpoint, classes and the columns its spec read), or, as `--compare`, any other
MLflow classifier (tracking/foreign_models.py), and the data read as the version reads inputs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from orchestrator.dataplane.prediction_reads import PredictionData, image_data, table_data
from orchestrator.tracking import registry, runs
from orchestrator.tracking.foreign_models import ForeignModel, foreign_model, is_congruent_version
from orchestrator.tracking.version_refs import RegistryError, VersionRef, parse_version_ref
from workers.errors import DataError
from workers.models.checkpoints import ModelSettings, read_checkpoint
from workers.storage import store


class PredictError(ValueError):
    """What stops `congruent predict` before or while it scores; one line."""


@dataclass(frozen=True)
class ScoredVersion:
    """A registered version as predict scores it: its checkpoint (checked against the sha256 its
    registration recorded), classes, and the columns its spec read."""

    ref: VersionRef
    checkpoint: str
    classes: tuple[str, ...]
    modality: str
    text_column: str
    label_column: str
    id_column: str | None
    encoding: str
    allow_user_factories: bool

    @property
    def shown(self) -> str:
        return f"{self.ref.name}/{self.ref.version}"

    @property
    def folder(self) -> str:
        return f"{self.ref.name}-v{self.ref.version}"


@dataclass(frozen=True)
class ForeignVersion:
    """A model outside Congruent compared with a version (`--compare` any MLflow model URI): its
    answers, class names, are matched by name to the version's `classes`; it reads texts from `column`."""

    model: ForeignModel
    classes: tuple[str, ...]
    column: str
    modality: str = "text"
    allow_user_factories: bool = False

    @property
    def shown(self) -> str:
        return self.model.shown

    @property
    def folder(self) -> str:
        return self.model.folder


Scored = ScoredVersion | ForeignVersion


def compared_model(text: str, version: ScoredVersion) -> Scored:
    """What `--compare` names: a version Congruent registered, or any other MLflow classifier (a
    registered model's version or alias, a run's model, any model URI), which scores texts only."""
    if parse_version_ref(text) is not None:
        ref = registry.resolve(text)  # RegistryError naming what the registry has instead
        if is_congruent_version(f"{ref.name}/{ref.version}"):
            return scored_version(text)
    foreign = foreign_model(text)
    if version.modality != "text":
        raise PredictError(
            f"--compare {text}: a model outside Congruent is compared on texts; {version.shown} reads images"
        )
    return ForeignVersion(foreign, version.classes, foreign.column or version.text_column)


def scored_version(text: str) -> ScoredVersion:
    """The version `text` names, fetched; RegistryError when it names none, or its artifacts changed."""
    ref = registry.resolve(text)
    checkpoint = registry.checkpoint_of(ref)
    record = read_checkpoint(checkpoint)
    spec = runs.spec_of(registry.run_of(ref))
    classes = tuple(str(c) for c in record.get("classes") or ())
    if not classes:
        raise RegistryError(f"{text}: its checkpoint records no class names; re-register it with this version")
    return ScoredVersion(
        ref,
        checkpoint,
        classes,
        ModelSettings.from_record(record["model"]).inputs.modality,
        spec.data.text_column,
        spec.data.label_column,
        spec.data.id_column,
        spec.data.encoding,
        spec.allow_user_factories,
    )


def predicted_data(
    path: str,
    version: ScoredVersion,
    text_column: str | None = None,
    label_column: str | None = None,
    id_column: str | None = None,
) -> PredictionData:
    """The data at `path` read as `version` reads inputs: a text version's table with its text column
    (its spec's, or `text_column`), an image version's folder; DataError naming what does not fit."""
    if version.modality != "text":
        if not Path(path).is_dir() and not store(path).remote:
            raise DataError(f"{path}: {version.shown} is an image model; give a folder of images")
        return image_data(path)
    try:
        return table_data(
            path,
            text_column or version.text_column,
            label_column or version.label_column,
            id_column if id_column is not None else version.id_column,
            version.encoding,
            label_named=label_column is not None,
        )
    except DataError as e:
        if text_column is None and "no column" in str(e):
            raise DataError(
                f"{e} ({version.shown} reads its texts from {version.text_column!r}; name another with --text-column)"
            ) from None
        raise


def check_comparable(new: ScoredVersion, old: ScoredVersion) -> None:
    """Two versions predict can score in one pass: one kind of input, classes one of the other's
    first classes (class ids then mean one class in both)."""
    if new.modality != old.modality:
        raise PredictError(f"{new.shown} reads {new.modality} and {old.shown} {old.modality}: not the same inputs")
    shorter, longer = sorted((new.classes, old.classes), key=len)
    if longer[: len(shorter)] != shorter:
        raise PredictError(
            f"{new.shown} and {old.shown} name their classes differently: their class ids do not compare"
        )
