"""Prediction files: what a version answered on a set of samples, by sample id — the one format
`congruent predict` writes and `congruent compare` reads beside a version's registry ledger.

- **Written** (`PredictionWriter`): a folder of Parquet shards `part-00000.parquet`, … of
  SHARD_ROWS rows each, columns `id` int64 (the sample's id, workers/data/keys.py: the same id a
  version's ledger holds for the same sample), `label` int64 (the sample's class id among the
  version's classes; null: the data has no label for it, or one the version does not know),
  `class` int64, `name` string and `probability` float64 (the version's answer; null where the row
  failed), and `error` string (why the row failed: an image that does not decode; null otherwise).
  A shard is written under a hidden name and renamed when complete, so a reader never sees half of one.
- **Read** (`read_predictions`): such a folder or one of its shards, or a registry ledger
  (`ledger/predictions.parquet`: `id`, `label`, `class_id`), as the arrays a comparison joins by id
  (orchestrator/tracking/ledger.py `shared_samples`): "ids", "labels", "class_ids" of the rows that
  were answered, with "known_classes", "fingerprint" and "positional" as a ledger's.

pyarrow and numpy only.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

SHARD_ROWS = 1 << 18  # rows of one written shard
SUFFIX = ".parquet"  # what a prediction file's name ends with
PART = "part-{:05d}" + SUFFIX
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("label", pa.int64()),
        ("class", pa.int64()),
        ("name", pa.string()),
        ("probability", pa.float64()),
        ("error", pa.string()),
    ]
)
LEDGER_METADATA_KEY = b"congruent.ledger"


class PredictionFileError(ValueError):
    """A file or folder that holds no predictions in this format; one line naming it."""


class PredictionWriter:
    """The shards of one version's predictions in `folder` (created; it must hold no shards yet)."""

    def __init__(self, folder: str | os.PathLike[str], shard_rows: int = SHARD_ROWS) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        if any(self.folder.glob("part-*.parquet")):
            raise PredictionFileError(f"{self.folder}: already holds prediction shards; name an empty folder")
        self.shard_rows = shard_rows
        self.shards = 0
        self.rows = 0
        self._writer: Any = None
        self._in_shard = 0

    def _hidden(self) -> Path:
        return self.folder / f".{PART.format(self.shards)}.partial"

    def _close_shard(self) -> None:
        if self._writer is None:
            return
        self._writer.close()
        self._hidden().replace(self.folder / PART.format(self.shards))
        self._writer, self._in_shard = None, 0
        self.shards += 1

    def write(self, columns: dict[str, Any]) -> None:
        """Append rows: a column per SCHEMA field (arrays or lists of one length; None where null)."""
        table = pa.table({f.name: pa.array(columns[f.name], type=f.type) for f in SCHEMA}, schema=SCHEMA)
        start = 0
        while start < table.num_rows:
            if self._writer is None:
                self._writer = pq.ParquetWriter(self._hidden(), SCHEMA)
            take = min(self.shard_rows - self._in_shard, table.num_rows - start)
            self._writer.write_table(table.slice(start, take))
            self._in_shard += take
            self.rows += take
            start += take
            if self._in_shard >= self.shard_rows:
                self._close_shard()

    def close(self) -> None:
        """Finish the last shard (an empty run still writes one shard of no rows)."""
        if self._writer is None and self.shards == 0:
            self._writer = pq.ParquetWriter(self._hidden(), SCHEMA)
        self._close_shard()


def prediction_shards(path: str | os.PathLike[str]) -> list[Path]:
    """The shards a path names: a folder's `part-*.parquet` (in order) or one .parquet file."""
    path = Path(path)
    if path.is_dir():
        shards = sorted(path.glob("part-*.parquet"))
        if not shards:
            raise PredictionFileError(f"{path}: a folder without prediction shards (part-*.parquet)")
        return shards
    if not path.exists():
        raise PredictionFileError(f"{path}: no such file or folder")
    if path.suffix != SUFFIX:
        raise PredictionFileError(f"{path}: not a .parquet file nor a folder of them")
    return [path]


def read_predictions(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The answered rows of a prediction folder or file, or of a registry ledger, as a ledger's
    arrays (module docstring); PredictionFileError naming a file that is neither."""
    ids, labels, classes = [], [], []
    known: Any = None
    fingerprint = ""
    for shard in prediction_shards(path):
        try:
            file = pq.ParquetFile(shard)
        except (pa.ArrowException, OSError) as e:
            raise PredictionFileError(f"{shard}: cannot read Parquet ({str(e).splitlines()[0]})") from None
        names = set(file.schema_arrow.names)
        metadata = file.schema_arrow.metadata or {}
        if {"id", "label", "class_id"} <= names and LEDGER_METADATA_KEY in metadata:  # a registry ledger
            meta = json.loads(metadata[LEDGER_METADATA_KEY])
            known, fingerprint = np.asarray(meta["known_classes"], dtype=np.int64), str(meta["fingerprint"])
            table = file.read(columns=["id", "label", "class_id"]).rename_columns(["id", "label", "class"])
        elif {"id", "label", "class"} <= names:
            table = file.read(columns=["id", "label", "class"])
        else:
            raise PredictionFileError(
                f"{shard}: neither prediction rows (id, label, class) nor a version's ledger; "
                f"its columns are {', '.join(sorted(names))}"
            )
        answered = table.filter(pc.is_valid(table.column("class")))
        ids.append(answered.column("id").to_numpy())
        labels.append(answered.column("label").fill_null(-1).to_numpy())
        classes.append(answered.column("class").to_numpy())
    return {
        "ids": np.concatenate(ids).astype(np.int64),
        "labels": np.concatenate(labels).astype(np.int64),
        "class_ids": np.concatenate(classes).astype(np.int64),
        "known_classes": known,
        "fingerprint": fingerprint,
        "positional": False,
    }
