"""The slice values of a version's eval samples, for its ledger (workers/slices.py): the spec's
`data.slice_columns` read from its text table's shards (local or on S3, a record batch at a time by
the format's reader, keeping only the eval samples' values) and its `data.slices` file, joined by
sample id (workers/data/keys.py): in the evaluation task for a version's ledger, in the driver for
auto's val split."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from orchestrator.dataplane.table_streams import listed_shards
from workers.data.formats.tables import table_format
from workers.data.keys import key_ids, text_keys
from workers.data.slice_table import read_slice_table, values_by_id
from workers.storage import open_input


def table_slice_values(
    path: str, text_column: str, id_column: str | None, encoding: str, columns: Sequence[str], ids: np.ndarray
) -> dict[str, np.ndarray]:
    """{column: each of `ids`' value in the table at `path`} ("" where it has none)."""
    files, suffix, _ = listed_shards(path)
    reader = table_format(suffix)
    key_column = id_column or text_column
    wanted = np.unique(ids)
    found: dict[str, dict[int, object]] = {column: {} for column in columns}
    for file in files:
        for table in reader.batches(partial(open_input, file), suffix, encoding, [key_column, *columns]):
            raw = table.column(key_column).to_pylist()
            if id_column:
                keys = ["" if v is None else str(v).strip() for v in raw]
            else:
                keys = text_keys([v if isinstance(v, str) else "" for v in raw])
            batch_ids = key_ids(keys)
            hits = np.flatnonzero(np.isin(batch_ids, wanted))
            for column in columns:
                values = table.column(column).to_pylist()
                found[column].update((int(batch_ids[i]), values[i]) for i in hits)
    named = np.array(sorted(set().union(*(f.keys() for f in found.values()))), dtype=np.int64)
    return values_by_id(named, {c: [found[c].get(int(i)) for i in named] for c in columns}, ids)


@dataclass(frozen=True)
class SliceSource:
    """Where a split's slice values are: the spec's `data.slice_columns` of its text table at `path`
    (read with its key column, id column and encoding), and its `data.slices` file."""

    path: str | None
    text_column: str
    id_column: str | None
    encoding: str
    columns: tuple[str, ...]
    slices_file: str | None

    @classmethod
    def of(cls, data: Any) -> SliceSource:
        """The slice source of a spec's `data` section (pipelines/spec.py `DataSpec`)."""
        return cls(data.path, data.text_column, data.id_column, data.encoding, tuple(data.slice_columns), data.slices)


def sample_slice_values(ids: np.ndarray, source: SliceSource) -> dict[str, np.ndarray] | None:
    """The slice values of samples `ids` (a split's): the source's columns of its table, then the
    columns of its slices file; None when the spec names no slices."""
    out: dict[str, np.ndarray] = {}
    if source.columns and source.path is not None:
        out |= table_slice_values(
            source.path, source.text_column, source.id_column, source.encoding, source.columns, ids
        )
    if source.slices_file is not None:
        named, columns = read_slice_table(source.slices_file)
        out |= values_by_id(named, columns, ids)
    return out or None
