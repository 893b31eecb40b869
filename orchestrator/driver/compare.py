"""`congruent compare`'s inputs and result: saved prediction files of successive versions, checked,
and their regression metrics against the same labels.

Two kinds of input, versions in the order given (0, 1, 2, …):
- NumPy arrays saved with `np.save`, by position: labels are 1-D non-negative integer class ids (a
  file of their own); a prediction file holds 1-D class ids or 2-D float logits (N×C).
- Prediction files by sample id (workers/prediction_files.py): `congruent predict`'s folders or
  shards, a version's registry ledger (a file, or `models:/NAME/VERSION`: any registered version
  with a ledger, a model Congruent did not train once an update against it recorded its answers),
  or a side of a serving session's live ledger
  (`live:RUN_ID/champion`, `live:RUN_ID/candidate`: orchestrator/tracking/live.py
  `live_predictions`). They carry their labels; they are compared on the samples every one of them
  answered that have a label (the newest file's), of the classes each ledger's version was trained
  on — as the registry's NFR matrix counts them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from workers import metrics, prediction_files

_NPY_MAGIC = b"\x93NUMPY"
_ZIP_MAGIC = b"PK\x03\x04"


class InputError(Exception):
    """An input file that cannot be used, with the problem in one line."""

    def __init__(self, path: str | os.PathLike, problem: str) -> None:
        self.path = os.fspath(path)
        self.problem = " ".join(problem.split())
        super().__init__(f"{self.path}: {self.problem}")


def _load_array(path: str | os.PathLike) -> np.ndarray:
    """Load one plain (non-pickled) array from a .npy file, or raise InputError."""
    if not os.path.exists(path):
        raise InputError(path, "no such file")
    if not os.path.isfile(path):
        raise InputError(path, "not a regular file")
    try:
        with open(path, "rb") as file:
            head = file.read(len(_NPY_MAGIC))
        if head.startswith(_ZIP_MAGIC):
            raise InputError(path, "is a .npz archive; expected a single-array .npy file")
        if head != _NPY_MAGIC:
            raise InputError(path, "not a .npy file (no NumPy header)")
        return np.load(path, allow_pickle=False)
    except ValueError as exc:
        if "allow_pickle" in str(exc):
            raise InputError(path, "holds pickled Python objects; save a numeric array") from None
        raise InputError(path, f"corrupt .npy file ({exc})") from None
    except OSError as exc:
        raise InputError(path, f"cannot read file ({exc})") from None


def load_labels(path: str | os.PathLike) -> np.ndarray:
    """Labels ℓ from a .npy file: non-empty, 1-D, integer, non-negative (returned as int64)."""
    labels = _load_array(path)
    if labels.ndim != 1:
        raise InputError(path, f"labels must be a 1-D array, got shape {labels.shape}")
    if not np.issubdtype(labels.dtype, np.integer):
        raise InputError(path, f"labels must be integer class ids, got dtype {labels.dtype}")
    if labels.size == 0:
        raise InputError(path, "labels are empty")
    if labels.min() < 0:
        raise InputError(path, f"labels contain negative class ids (min {labels.min()})")
    return labels.astype(np.int64, copy=False)


def load_prediction_file(path: str | os.PathLike, n: int | None = None, num_classes: int | None = None) -> np.ndarray:
    """Predictions from a .npy file: 1-D non-negative integer ids or 2-D finite float logits.

    When `n` is given, the file must hold exactly n predictions; with `num_classes` (the labels'
    largest id + 1), logits need a column for each of those classes. Returns the array as stored.
    """
    predictions = _load_array(path)
    if predictions.ndim == 1:
        if not np.issubdtype(predictions.dtype, np.integer):
            raise InputError(path, f"1-D predictions must be integer class ids, got dtype {predictions.dtype}")
        if predictions.size and predictions.min() < 0:
            raise InputError(path, f"predictions contain negative class ids (min {predictions.min()})")
    elif predictions.ndim == 2:
        if not np.issubdtype(predictions.dtype, np.floating):
            raise InputError(path, f"2-D predictions must be float logits, got dtype {predictions.dtype}")
        if predictions.shape[1] == 0:
            raise InputError(path, f"logits have zero classes (shape {predictions.shape})")
        if num_classes is not None and predictions.shape[1] < num_classes:
            raise InputError(
                path,
                f"logits have {predictions.shape[1]} columns, but the labels reach class "
                f"{num_classes - 1}: a model of these labels has at least {num_classes}",
            )
        finite_rows = np.isfinite(predictions).all(axis=1)
        if not finite_rows.all():
            row = int(np.argmin(finite_rows))
            raise InputError(path, f"logits contain NaN or Inf (first in row {row})")
    else:
        raise InputError(
            path,
            "predictions must be 1-D class ids or 2-D logits, "
            f"got a {predictions.ndim}-D array of shape {predictions.shape}",
        )
    if len(predictions) == 0:
        raise InputError(path, "predictions are empty")
    if n is not None and len(predictions) != n:
        raise InputError(path, f"has {len(predictions)} predictions but the labels have {n}")
    return predictions


LIVE_PREFIX = "live:"  # `live:RUN_ID/champion` or `live:RUN_ID/candidate`: a side of a serving session's ledger
MODELS_PREFIX = "models:/"  # `models:/NAME/VERSION` or `models:/NAME@ALIAS`: a registered version's ledger


def by_id(paths: Sequence[str]) -> bool:
    """Whether the inputs are predictions by sample id (Parquet files or folders, live ledger sides)
    rather than .npy arrays."""
    return all(
        os.path.isdir(p) or str(p).endswith(prediction_files.SUFFIX) or str(p).startswith((LIVE_PREFIX, MODELS_PREFIX))
        for p in paths
    )


def live_side(ref: str) -> dict[str, Any]:
    """The side of a serving session's live ledger `ref` names (`live:RUN_ID/SIDE`), by sample id."""
    from orchestrator.tracking.live import LIVE_SIDES, live_predictions, live_run_tags
    from orchestrator.tracking.store import configure
    from orchestrator.tracking.tags import LIVE_TAG

    run_id, _, side = ref.removeprefix(LIVE_PREFIX).partition("/")
    if side not in LIVE_SIDES:
        raise InputError(ref, f"name a side of the session: {LIVE_PREFIX}RUN_ID/champion or /candidate")
    configure()
    tags = live_run_tags(run_id)
    if tags is None:
        raise InputError(ref, f"no run {run_id!r} in the tracking store")
    if LIVE_TAG not in tags:
        raise InputError(ref, f"run {run_id} is not a serving session's live ledger")
    return live_predictions(run_id, side)


def registered_side(ref: str) -> dict[str, Any]:
    """The ledger of the registered version `ref` names (`models:/NAME/VERSION`, `models:/NAME@ALIAS`):
    its run's own, or for a model Congruent did not train, its answers as an update against it
    recorded them (tracking/ledger_files.py)."""
    from orchestrator.tracking import registry
    from orchestrator.tracking.ledger import COMPARED
    from orchestrator.tracking.store import configure
    from orchestrator.tracking.version_refs import RegistryError

    configure()
    try:
        return registry.ledger_of(registry.resolve(ref), COMPARED)
    except RegistryError as e:
        raise InputError(ref, str(e)) from None


def aligned_predictions(paths: Sequence[str]) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """(sample ids, labels, class ids of each file) on the samples all of `paths` hold with a label
    (module docstring); InputError naming a file that is not a prediction file, or no sample in common."""
    from orchestrator.tracking.ledger import common_samples, known_mask
    from workers.prediction_files import PredictionFileError, read_predictions

    files = []
    for path in paths:
        if str(path).startswith(LIVE_PREFIX):
            files.append(live_side(str(path)))
            continue
        if str(path).startswith(MODELS_PREFIX):
            files.append(registered_side(str(path)))
            continue
        try:
            files.append(read_predictions(path))
        except PredictionFileError as e:
            raise InputError(path, str(e).removeprefix(f"{path}: ")) from None
    positions = common_samples(files)
    labels = files[-1]["labels"][positions[-1]]
    keep = labels >= 0
    for file in files:
        keep &= known_mask(file, labels)
    if not keep.any():
        raise InputError(paths[-1], f"no labelled sample that every one of the {len(paths)} files answered")
    ids = files[-1]["ids"][positions[-1]][keep]
    return ids, labels[keep], [file["class_ids"][where][keep] for file, where in zip(files, positions)]


def slice_values(path: str, ids: np.ndarray) -> dict[str, np.ndarray]:
    """{column: the slices file's value of each of `ids`} ("" for an id the file does not name);
    InputError naming the file when it cannot be read or names none of the samples."""
    from workers.data.slice_table import read_slice_table, values_by_id
    from workers.errors import DataError

    try:
        named, columns = read_slice_table(path)
    except DataError as e:
        raise InputError(path, str(e).removeprefix(f"{path}: ")) from None
    if not np.isin(ids, named).any() and len(ids):
        raise InputError(
            path,
            f"names none of the {len(ids):,} compared samples by id "
            "(sample keys: an id column's values, a text, an image's path)",
        )
    return values_by_id(named, columns, ids)


def compare_slices(
    labels: np.ndarray, predictions: Sequence[np.ndarray], slices: dict[str, np.ndarray], min_n: int
) -> list[dict[str, Any]]:
    """Per consecutive pair (old, new): its slices' rows, worst first (workers/slices.py `slice_rows`)."""
    from workers.slices import slice_flip_counts, slice_rows

    out = []
    for old in range(len(predictions) - 1):
        counts = slice_flip_counts(predictions[old], predictions[old + 1], labels, slices)
        out.append({"old": old, "new": old + 1, "slices": slice_rows(counts, SLICE_CONFIDENCE, min_n)})
    return out


SLICE_CONFIDENCE = 0.95  # the level of each slice's NFR upper bound


def compare_predictions(labels: Any, predictions_list: Sequence[Any]) -> dict[str, Any]:
    """Metrics of versions 0..V−1 against `labels`, as the `--json` dict.

    error_rate[v] = ER of version v; pairs = consecutive updates v → v+1 with
    NFR, PFR and Rel-NFR (None if undefined); nfr_matrix[i][j] = NFR of j relative to i.
    """
    ids = [metrics.class_ids(predictions) for predictions in predictions_list]
    error_rates = [metrics.error_rate(version, labels) for version in ids]
    pairs = []
    for old in range(len(ids) - 1):
        new = old + 1
        nfr = metrics.negative_flip_rate(ids[old], ids[new], labels)
        pairs.append(
            {
                "old": old,
                "new": new,
                "nfr": nfr,
                "pfr": metrics.positive_flip_rate(ids[old], ids[new], labels),
                "rel_nfr": metrics.relative_nfr(nfr, error_rates[old], error_rates[new]),
            }
        )
    return {
        "n": int(len(labels)),
        "error_rate": error_rates,
        "pairs": pairs,
        "nfr_matrix": metrics.nfr_matrix(ids, labels).tolist(),
    }
