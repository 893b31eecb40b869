"""The prediction ledger of a version: for every sample of its regression-eval split, the sample's
id (workers/data/keys.py), label, predicted class and top-k logits, so that ER, NFR and PFR between
any two versions need no re-inference and are counted on the samples both were evaluated on.

- **File**: one Parquet file (columns `id` int64, `label` int64, `class_id` int32, `topk_class` and
  `topk_value`, fixed-size lists of k), written LEDGER_BLOCK rows (one row group) at a time from a
  (memory-mapped) N×C array of logits, so no N×C array is held; the eval split's fingerprint and
  the classes the version was trained on are in the file's metadata (`congruent.ledger`).
- **Two versions compared** (`shared_samples`): joined on the sample id. Copies of a text share an
  id (its content names it); the k-th copy of an id in one ledger meets the k-th in the other,
  copies ordered by label, so identical rows pair with each other. Labels are the newer ledger's.
  Joining needs the ids, labels and classes of both (20 bytes a sample each), not the logits.
- **Ledgers written before ids** (`predictions.npz`, by position) still read: their ids are their
  positions (`positional`), so two of them on one eval split compare as before; one of them beside
  a ledger with ids is refused (`LedgerMismatch`) with how to re-evaluate.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

from workers.metrics import FlipCounts, class_ids

LEDGER_TOPK = 5
LEDGER_BLOCK = 1 << 16  # samples a ledger is written by (one row group)
LEDGER_FILE = "predictions.parquet"  # in the run's `ledger/` artifacts
LEGACY_LEDGER_FILE = "predictions.npz"  # by position, before sample ids
METADATA_KEY = b"congruent.ledger"
COMPARED = ("ids", "labels", "class_ids")  # what a comparison reads of a ledger
SLICE_PREFIX = "slice."  # a slice column's name in a ledger: slice.COL


class LedgerMismatch(ValueError):
    """Two ledgers that cannot be compared sample by sample (one line: why, and what to do)."""


def write_ledger(
    path: Path,
    logits: np.ndarray,
    labels: np.ndarray,
    ids: np.ndarray,
    fingerprint: str,
    known_classes: list[int] | None = None,
    slices: Mapping[str, np.ndarray] | None = None,
) -> Path:
    """The ledger of an evaluation (module docstring) as Parquet at `path`: `logits` N×C
    (memory-mapped or not) read LEDGER_BLOCK rows at a time, `labels` and `ids` N, the eval
    split's `fingerprint`, the classes the version was trained on (flips against it count on
    those; None: all C), and each sample's value of each slice column (`slices`: column `slice.COL`,
    "" where a sample has none; workers/slices.py)."""
    n, width = logits.shape
    if len(labels) != n or len(ids) != n:
        raise ValueError(f"a ledger of {n} logits needs {n} labels and ids, got {len(labels)} and {len(ids)}")
    slices = dict(slices or {})
    if any(len(values) != n for values in slices.values()):
        raise ValueError(f"a ledger of {n} samples needs {n} values of each slice column")
    k = min(LEDGER_TOPK, width)
    known = list(range(width)) if known_classes is None else [int(c) for c in known_classes]
    meta = {"format": 2, "fingerprint": fingerprint, "known_classes": known, "slice_columns": list(slices)}
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("label", pa.int64()),
            ("class_id", pa.int32()),
            ("topk_class", pa.list_(pa.int32(), k)),
            ("topk_value", pa.list_(pa.float32(), k)),
            *((SLICE_PREFIX + column, pa.string()) for column in slices),
        ],
        metadata={METADATA_KEY: json.dumps(meta).encode()},
    )
    with pq.ParquetWriter(path, schema) as writer:
        for start in range(0, max(n, 1), LEDGER_BLOCK):
            window = slice(start, start + LEDGER_BLOCK)
            block = np.asarray(logits[window], dtype=np.float32)
            top = np.argsort(-block, axis=1, kind="stable")[:, :k].astype(np.int32)
            values = np.take_along_axis(block, top, axis=1)
            columns = [
                pa.array(np.asarray(ids[window], dtype=np.int64)),
                pa.array(np.asarray(labels[window], dtype=np.int64)),
                pa.array(class_ids(block).astype(np.int32)),
                pa.FixedSizeListArray.from_arrays(pa.array(top.reshape(-1)), k),
                pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), k),
                *(pa.array([str(v) for v in column[window]], type=pa.string()) for column in slices.values()),
            ]
            writer.write_table(pa.Table.from_arrays(columns, schema=schema))
    return path


def read_ledger(path: str | Path, columns: Sequence[str] | None = None) -> dict[str, Any]:
    """A ledger's arrays: "ids", "labels", "class_ids", "topk_indices", "topk_values" (or only
    `columns` of them), "slices" ({column: each sample's value}, empty in a ledger without slices;
    with `columns`, only when they name "slices"), and "known_classes" (None: every class),
    "fingerprint" and "positional" (True for a ledger written before ids: its ids are its positions)."""
    path = Path(path)
    if path.suffix == ".npz":
        return _read_legacy(path, columns)
    names = {"ids": "id", "labels": "label", "class_ids": "class_id", "topk_indices": "topk_class"}
    names["topk_values"] = "topk_value"
    wanted = list(names) if columns is None else [name for name in columns if name != "slices"]
    file = pq.ParquetFile(path)
    meta = json.loads(file.schema_arrow.metadata[METADATA_KEY])
    slice_columns = list(meta.get("slice_columns", [])) if columns is None or "slices" in columns else []
    table = file.read(columns=[names[name] for name in wanted] + [SLICE_PREFIX + c for c in slice_columns])
    out: dict[str, Any] = {}
    for name in wanted:
        column = table.column(names[name]).combine_chunks()
        if name.startswith("topk"):
            k = column.type.list_size
            out[name] = column.flatten().to_numpy().reshape(-1, k)
        else:
            out[name] = column.to_numpy()
    if columns is None or "slices" in columns:
        out["slices"] = {c: np.array(table.column(SLICE_PREFIX + c).to_pylist(), dtype=object) for c in slice_columns}
    out["known_classes"] = np.asarray(meta["known_classes"], dtype=np.int64)
    out["fingerprint"] = str(meta["fingerprint"])
    out["positional"] = False
    return out


def _read_legacy(path: Path, columns: Sequence[str] | None) -> dict[str, Any]:
    with np.load(path, allow_pickle=False) as archive:
        out: dict[str, Any] = {key: archive[key] for key in archive.files if key != "fingerprint"}
        fingerprint = str(archive["fingerprint"]) if "fingerprint" in archive.files else ""
    out["ids"] = np.arange(len(out["labels"]), dtype=np.int64)
    out["slices"] = {}
    if columns is not None:
        out = {name: out[name] for name in columns}
    out.setdefault("known_classes", None)
    out["fingerprint"] = fingerprint
    out["positional"] = True
    return out


def known_mask(ledger: dict[str, Any], labels: np.ndarray | None = None) -> np.ndarray:
    """Which of `labels` (the ledger's own by default) are of a class the ledger's version was
    trained on (all, in a ledger that does not record its classes)."""
    labels = ledger["labels"] if labels is None else labels
    known = ledger.get("known_classes")
    return np.ones(len(labels), bool) if known is None else np.isin(labels, known)


def _keys(ledger: dict[str, Any]) -> np.ndarray:
    """(id, copy) per sample: the k-th copy of an id (copies ordered by label, then position)."""
    ids, labels = ledger["ids"], ledger["labels"]
    order = np.lexsort((np.arange(len(ids)), labels, ids))
    sorted_ids = ids[order]
    starts = np.r_[True, sorted_ids[1:] != sorted_ids[:-1]]
    run_start = np.maximum.accumulate(np.where(starts, np.arange(len(ids)), 0))
    copy = np.empty(len(ids), np.int64)
    copy[order] = np.arange(len(ids)) - run_start
    keys = np.empty(len(ids), dtype=[("id", "<i8"), ("copy", "<i8")])
    keys["id"], keys["copy"] = ids, copy
    return keys


def shared_samples(old: dict[str, Any], new: dict[str, Any], names: tuple[str, str] = ("old", "new")) -> tuple:
    """(positions in `old`, positions in `new`) of the samples both ledgers hold, matched by id
    (module docstring); LedgerMismatch when one ledger is by position and the other by id, or both
    by position on different eval splits."""
    if old["positional"] or new["positional"]:
        if not (old["positional"] and new["positional"]):
            which = names[0] if old["positional"] else names[1]
            raise LedgerMismatch(
                f"{which}'s ledger predates sample ids (it holds predictions by position); re-evaluate it "
                "on its data (rerun its spec with the same model name: `congruent run SPEC`) to compare it by sample"
            )
        if old["fingerprint"] != new["fingerprint"] or len(old["ids"]) != len(new["ids"]):
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        every = np.arange(len(old["ids"]))
        return every, every
    _, in_old, in_new = np.intersect1d(_keys(old), _keys(new), assume_unique=True, return_indices=True)
    return in_old, in_new


def pair_counts(old: dict[str, Any], new: dict[str, Any], on_known: bool = True) -> FlipCounts:
    """The flip counts of `new` against `old` on the samples both hold, with `new`'s labels; with
    `on_known`, only those of the classes `old` was trained on."""
    in_old, in_new = shared_samples(old, new)
    labels = new["labels"][in_new]
    keep = known_mask(old, labels) if on_known else np.ones(len(labels), bool)
    return FlipCounts.of(old["class_ids"][in_old][keep], new["class_ids"][in_new][keep], labels[keep])


def chain_nfr_matrix(ledgers: Sequence[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """(M, S): M[i, j] = NFR of version j relative to version i and S[i, j] the samples it is
    counted on — those both were evaluated on, of the classes version i knows (NaN where none).
    `ledgers` are read with `read_ledger(path, COMPARED)`, in version order."""
    size = len(ledgers)
    matrix = np.full((size, size), np.nan)
    shared = np.zeros((size, size), dtype=np.int64)
    for i, old in enumerate(ledgers):
        for j, new in enumerate(ledgers):
            try:
                counts = pair_counts(old, new) if i != j else pair_counts(old, old)
            except LedgerMismatch:
                continue
            shared[i, j] = counts.n
            if counts.n:
                matrix[i, j] = counts.negative / counts.n
    return matrix, shared


def common_samples(ledgers: Sequence[dict[str, Any]]) -> list[np.ndarray]:
    """Positions, in each of `ledgers` (by id, not positional), of the samples every one of them holds,
    in one order (by id, then copy: module docstring), so that position i of each is one sample."""
    keys = [_keys(ledger) for ledger in ledgers]
    common = keys[0]
    for other in keys[1:]:
        common = np.intersect1d(common, other, assume_unique=True)
    return [np.intersect1d(common, k, assume_unique=True, return_indices=True)[2] for k in keys]
