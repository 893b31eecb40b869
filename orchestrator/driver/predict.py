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

from orchestrator.dataplane.prediction_reads import PredictionData, scored_dataset
from orchestrator.dataplane.ray_reading import data_error
from orchestrator.driver.predicted_versions import (
    ForeignVersion,
    PredictError,
    Scored,
    ScoredVersion,
    check_comparable,
    compared_model,
    predicted_data,
    scored_version,
)
from orchestrator.tracking.foreign_models import PyfuncAnswers
from orchestrator.tracking.store import tracking_uri
from orchestrator.tracking.version_refs import RegistryError
from workers.errors import DataError
from workers.metrics import FlipCounts
from workers.models.scoring import NO_CLASS
from workers.prediction_files import PredictionFileError, PredictionWriter

PROGRESS_S = 5.0  # seconds between progress lines
SUMMARY_FILE = "summary.json"


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


def write_rows(writer: PredictionWriter, batch: dict[str, np.ndarray], key: str, version: Scored) -> None:
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
            "probability": [
                float(p) if ok and not np.isnan(p) else None for p, ok in zip(batch[f"probability_{key}"], answered)
            ],
            "error": [e if not ok else None for e, ok in zip(batch[f"error_{key}"], answered)],
        }
    )


def tally(counts: VersionTally, batch: dict[str, np.ndarray], key: str, version: Scored) -> None:
    classes = batch[f"class_{key}"]
    labels = label_ids(batch["label"], version.classes)
    answered, labelled = classes != NO_CLASS, labels >= 0
    counts.rows += len(classes)
    counts.failed += int(np.count_nonzero(~answered))
    counts.labelled += int(np.count_nonzero(answered & labelled))
    counts.errors += int(np.count_nonzero(answered & labelled & (classes != labels)))


def tally_pair(pair: PairTally, batch: dict[str, np.ndarray], new: Scored, old: Scored) -> None:
    """Flips of new against old: on rows both answered, of labels old knows (ids by new's classes)."""
    a, b = batch["class_old"], batch["class_new"]
    both = (a != NO_CLASS) & (b != NO_CLASS)
    pair.both += int(np.count_nonzero(both))
    pair.disagree += int(np.count_nonzero(both & (a != b)))
    labels = label_ids(batch["label"], new.classes)
    keep = both & (labels >= 0) & (labels < len(old.classes))
    pair.flips = pair.flips + FlipCounts.of(a[keep], b[keep], labels[keep])


@dataclass(frozen=True)
class Scoring:
    """How Ray Data scores: rows an actor scores at a time, actors, and what each reserves."""

    batch_size: int = 256
    concurrency: int = 1
    cpus: float = 1.0
    gpus: float = 0.0


@dataclass(frozen=True)
class PredictJob:
    """What `congruent predict` scores: a version (and the old one it is compared with), the data
    read as the version reads inputs, the output folder (created)."""

    version: ScoredVersion
    old: Scored | None
    data: PredictionData
    out: Path


def prepare_prediction(
    model: str, compare: str | None, path: str, out: str, columns: tuple[str | None, str | None, str | None]
) -> PredictJob:
    """The versions (`model`, `compare`), the data at `path` (`columns`: the text, label and id
    columns named on the command line) and the output folder `out`, each checked before Ray starts:
    PredictError naming the first problem."""
    from orchestrator.tracking.store import configure

    configure()
    try:
        version = scored_version(model)
        old = compared_model(compare, version) if compare else None
        if isinstance(old, ScoredVersion) and old.ref == version.ref:
            raise PredictError(f"--compare names {version.shown} itself: give the version to compare it with")
        if isinstance(old, ScoredVersion):
            check_comparable(version, old)
        data = predicted_data(path, version, *columns)
        Path(out).mkdir(parents=True, exist_ok=True)
    except (RegistryError, DataError) as error:
        raise PredictError(str(error)) from None
    except OSError as error:
        raise PredictError(f"{out}: cannot create the output folder ({error.strerror})") from None
    return PredictJob(version, old, data, Path(out))


def run_prediction(
    job: PredictJob, ray_address: str | None, scoring: Scoring, progress: Callable[[str], None]
) -> dict[str, Any]:
    """Join the cluster (or start Ray here) and score `job` (see `predict`); PredictError when the
    data or the scoring fails."""
    from orchestrator.execution.cluster import connect

    connect(ray_address, worker_logs=False)
    try:
        return predict(job.version, job.data, job.out, job.old, scoring, progress)
    except DataError as error:
        raise PredictError(str(error)) from None


def predict(
    version: ScoredVersion,
    data: PredictionData,
    out: Path,
    old: Scored | None = None,
    scoring: Scoring = Scoring(),
    progress: Callable[[str], None] = lambda line: None,
) -> dict[str, Any]:
    """Score `data` with `version` (and `old`) on the connected Ray cluster; write each version's
    prediction files under `out/NAME-vN/` and `out/summary.json`; return the summary. Nothing is
    left under `out` when it fails."""
    scored: dict[str, Scored] = {"new": version, **({"old": old} if old else {})}
    folders = {key: out / v.folder for key, v in scored.items()}
    for key, folder in folders.items():
        if folder.exists() and any(folder.iterdir()):
            raise PredictError(f"{folder}: already holds predictions of {scored[key].shown}; name another --out")
    if (out / SUMMARY_FILE).exists():
        raise PredictError(f"{out / SUMMARY_FILE}: already holds an earlier prediction's summary; name another --out")
    counts = {key: VersionTally() for key in scored}
    pair = PairTally()
    started = time.monotonic()
    foreign = {
        key: {"uri": v.model.uri, "column": v.column, "classes": v.classes, "key": key, "tracking_uri": tracking_uri()}
        for key, v in scored.items()
        if isinstance(v, ForeignVersion)
    }
    dataset = scored_dataset(
        data,
        {key: v.checkpoint for key, v in scored.items() if isinstance(v, ScoredVersion)},
        scoring.batch_size,
        scoring.concurrency,
        scoring.cpus,
        scoring.gpus,
        any(v.allow_user_factories for v in scored.values()),
        [(PyfuncAnswers, kwargs) for kwargs in foreign.values()],
    )
    try:
        _score(dataset, scored, folders, counts, pair, progress)
    except BaseException as e:
        for folder in folders.values():
            shutil.rmtree(folder, ignore_errors=True)
        found = data_error(e)
        if found is not None:
            raise found from None
        if isinstance(e, PredictionFileError):
            raise PredictError(str(e)) from None
        raise
    summary = _summary(data, scored, folders, counts, time.monotonic() - started)
    if old is not None:
        summary["pair"] = pair.report()
    (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=2))
    return summary


def _score(
    dataset: Any,
    scored: dict[str, Scored],
    folders: dict[str, Path],
    counts: dict[str, VersionTally],
    pair: PairTally,
    progress: Callable[[str], None],
) -> None:
    """Every batch of `dataset` written to each version's folder and tallied (the pair's flips too)."""
    writers = {key: PredictionWriter(folder) for key, folder in folders.items()}
    started = last = time.monotonic()
    for batch in dataset.iter_batches(batch_size=None, batch_format="numpy"):
        for key, v in scored.items():
            write_rows(writers[key], batch, key, v)
            tally(counts[key], batch, key, v)
        if "old" in scored:
            tally_pair(pair, batch, scored["new"], scored["old"])
        if time.monotonic() - last >= PROGRESS_S:
            last = time.monotonic()
            rows = counts["new"].rows
            progress(f"predict: {rows:,} rows scored ({rows / (last - started):,.0f}/s)")
    for writer in writers.values():
        writer.close()


def _summary(
    data: PredictionData,
    scored: dict[str, Scored],
    folders: dict[str, Path],
    counts: dict[str, VersionTally],
    seconds: float,
) -> dict[str, Any]:
    """summary.json: the data, the versions, where their predictions are, speed, each version's tally."""
    return {
        "data": list(data.files[:1]) + (["…"] if len(data.files) > 1 else []),
        "files": len(data.files),
        "labelled": data.label_column is not None,
        "versions": {key: v.shown for key, v in scored.items()},
        "predictions": {key: str(folder) for key, folder in folders.items()},
        "seconds": round(seconds, 3),
        "rows_per_second": counts["new"].rows / seconds if seconds else None,
        **{key: counts[key].report() for key in scored},
    }
