"""A slices file: a table (CSV/TSV/JSONL/Parquet) of `id` and one column per slice dimension, joined
to predictions by sample id (workers/slices.py). Its `id` column holds sample keys — a table's id
column value, an image's path under its folder, or a text itself (workers/data/keys.py) — so the
user writes what names the sample, never its hash."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from workers.data.formats.tables import table_format
from workers.data.keys import key_ids
from workers.data.text_tables import id_keys
from workers.errors import DataError, first_line
from workers.names import TEXT_FORMATS

ID_COLUMN = "id"


def read_slice_table(path: str | Path) -> tuple[np.ndarray, dict[str, list[Any]]]:
    """(sample ids, {column: values}) of a slices file; DataError naming the file: another format,
    no `id` column, a blank or repeated id, no slice column beside it."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in TEXT_FORMATS:
        raise DataError(f"{path}: a slices file is a {', '.join(TEXT_FORMATS)} table of id and slice columns")
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    reader = table_format(suffix)
    try:
        values, names = reader.column(path, suffix, "utf-8", ID_COLUMN)
        if values is None:
            raise DataError(f"{path}: no column {ID_COLUMN!r}; the columns are {', '.join(map(repr, names))}")
        columns = {name: reader.column(path, suffix, "utf-8", name)[0] or [] for name in names if name != ID_COLUMN}
    except (OSError, UnicodeDecodeError, ValueError) as e:
        if isinstance(e, DataError):
            raise
        raise DataError(f"{path}: cannot read ({first_line(e)})") from None
    if not columns:
        raise DataError(f"{path}: no slice column beside {ID_COLUMN!r}")
    return key_ids(id_keys(path, values, ID_COLUMN)), columns


def values_by_id(named: np.ndarray, columns: dict[str, list[Any]], ids: np.ndarray) -> dict[str, np.ndarray]:
    """{column: the value of each of `ids`} from rows whose ids are `named` ("" for an id no row names,
    or a null value; every copy of an id takes its row's value)."""
    position = {int(i): k for k, i in enumerate(named.tolist())}
    rows = [position.get(int(i)) for i in ids.tolist()]
    return {
        column: np.array(["" if k is None or values[k] is None else str(values[k]) for k in rows], dtype=object)
        for column, values in columns.items()
    }
