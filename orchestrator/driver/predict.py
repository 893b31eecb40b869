"""`congruent predict`: a registered version's answers on any data the data plane reads, scored on
Ray Data by an actor pool (orchestrator/dataplane/prediction_reads.py), written as prediction files
(workers/prediction_files.py) with each row's sample id; with `compare`, a second version scored in
the same pass and the two counted against each other: disagreement always, and ER, NFR and PFR
where the data has labels — the flips of an update on data nobody evaluated it on, before it is
served. Counts are global (every row once), kept as the rows stream by: no process holds the data.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from orchestrator.dataplane.prediction_reads import PredictionData, image_data, scored_dataset, table_data
from orchestrator.dataplane.ray_reading import data_error
from orchestrator.tracking import registry, runs
from orchestrator.tracking.version_refs import RegistryError, VersionRef
from workers.errors import DataError
from workers.metrics import FlipCounts
from workers.models.checkpoints import ModelSettings, read_checkpoint
from workers.models.scoring import NO_CLASS
from workers.prediction_files import PredictionFileError, PredictionWriter
from workers.storage import store

PROGRESS_S = 5.0  # seconds between progress lines
SUMMARY_FILE = "summary.json"


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


@dataclass
class VersionTally:
    """One version's rows: scored, failed, and errors over its labelled rows."""

    rows: int = 0
    failed: int = 0
    labelled: int = 0
    errors: int = 0

    def report(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "failed": self.failed,
            "labelled": self.labelled,
            "error_rate": self.errors / self.labelled if self.labelled else None,
        }


@dataclass
class PairTally:
    """Two versions' rows both answered: how many, how many they disagree on, and flip counts over
    those with a label both versions know."""

    both: int = 0
    disagree: int = 0
    flips: FlipCounts = field(default_factory=FlipCounts)

    def report(self) -> dict[str, Any]:
        out: dict[str, Any] = {"compared": self.both, "disagreement": self.disagree / self.both if self.both else None}
        if self.flips.n:
            out |= {k: v for k, v in self.flips.report().items()}
        else:
            out |= {"n": 0, "nfr": None, "pfr": None}
        return out


def label_ids(labels: np.ndarray, classes: tuple[str, ...]) -> np.ndarray:
    """int64 class id of each label text by `classes` (−1: no label, or a class not among them)."""
    index = {name: i for i, name in enumerate(classes)}
    return np.array([-1 if label is None else index.get(str(label), -1) for label in labels], dtype=np.int64)


def write_rows(writer: PredictionWriter, batch: dict[str, np.ndarray], key: str, version: ScoredVersion) -> None:
    classes = batch[f"class_{key}"]
    answered = classes != NO_CLASS
    labels = label_ids(batch["label"], version.classes)
    writer.write(
        {
            "id": batch["id"],
            "label": [None if k < 0 else int(k) for k in labels],
            "class": [int(k) if ok else None for k, ok in zip(classes, answered)],
            "name": [
                version.classes[k] if ok and k < len(version.classes) else None for k, ok in zip(classes, answered)
            ],
            "probability": [float(p) if ok else None for p, ok in zip(batch[f"probability_{key}"], answered)],
            "error": [e if not ok else None for e, ok in zip(batch[f"error_{key}"], answered)],
        }
    )


def tally(counts: VersionTally, batch: dict[str, np.ndarray], key: str, version: ScoredVersion) -> None:
    classes = batch[f"class_{key}"]
    labels = label_ids(batch["label"], version.classes)
    answered, labelled = classes != NO_CLASS, labels >= 0
    counts.rows += len(classes)
    counts.failed += int(np.count_nonzero(~answered))
    counts.labelled += int(np.count_nonzero(answered & labelled))
    counts.errors += int(np.count_nonzero(answered & labelled & (classes != labels)))


def tally_pair(pair: PairTally, batch: dict[str, np.ndarray], new: ScoredVersion, old: ScoredVersion) -> None:
    """Flips of new against old: on rows both answered, of labels old knows (ids by new's classes)."""
    a, b = batch["class_old"], batch["class_new"]
    both = (a != NO_CLASS) & (b != NO_CLASS)
    pair.both += int(np.count_nonzero(both))
    pair.disagree += int(np.count_nonzero(both & (a != b)))
    labels = label_ids(batch["label"], new.classes)
    keep = both & (labels >= 0) & (labels < len(old.classes))
    pair.flips = pair.flips + FlipCounts.of(a[keep], b[keep], labels[keep])


def predict(
    version: ScoredVersion,
    data: PredictionData,
    out: Path,
    old: ScoredVersion | None = None,
    batch_size: int = 256,
    concurrency: int = 1,
    cpus: float = 1.0,
    gpus: float = 0.0,
    progress: Callable[[str], None] = lambda line: None,
) -> dict[str, Any]:
    """Score `data` with `version` (and `old`) on the connected Ray cluster; write each version's
    prediction files under `out/NAME-vN/` and `out/summary.json`; return the summary. Nothing is
    left under `out` when it fails."""
    scored = {"new": version, **({"old": old} if old else {})}
    folders = {key: out / v.folder for key, v in scored.items()}
    for key, folder in folders.items():
        if folder.exists() and any(folder.iterdir()):
            raise PredictError(f"{folder}: already holds predictions of {scored[key].shown}; name another --out")
    writers = {key: PredictionWriter(folder) for key, folder in folders.items()}
    counts = {key: VersionTally() for key in scored}
    pair = PairTally()
    started = last = time.monotonic()
    dataset = scored_dataset(
        data,
        {key: v.checkpoint for key, v in scored.items()},
        batch_size,
        concurrency,
        cpus,
        gpus,
        any(v.allow_user_factories for v in scored.values()),
    )
    try:
        for batch in dataset.iter_batches(batch_size=None, batch_format="numpy"):
            for key, v in scored.items():
                write_rows(writers[key], batch, key, v)
                tally(counts[key], batch, key, v)
            if old is not None:
                tally_pair(pair, batch, version, old)
            if time.monotonic() - last >= PROGRESS_S:
                last = time.monotonic()
                rows = counts["new"].rows
                progress(f"predict: {rows:,} rows scored ({rows / (last - started):,.0f}/s)")
        for writer in writers.values():
            writer.close()
    except BaseException as e:
        for folder in folders.values():
            shutil.rmtree(folder, ignore_errors=True)
        found = data_error(e)
        if found is not None:
            raise found from None
        if isinstance(e, PredictionFileError):
            raise PredictError(str(e)) from None
        raise
    seconds = time.monotonic() - started
    summary: dict[str, Any] = {
        "data": list(data.files[:1]) + (["…"] if len(data.files) > 1 else []),
        "files": len(data.files),
        "labelled": data.label_column is not None,
        "versions": {key: v.shown for key, v in scored.items()},
        "predictions": {key: str(folder) for key, folder in folders.items()},
        "seconds": round(seconds, 3),
        "rows_per_second": counts["new"].rows / seconds if seconds else None,
        **{key: counts[key].report() for key in scored},
    }
    if old is not None:
        summary["pair"] = pair.report()
    (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=2))
    return summary
