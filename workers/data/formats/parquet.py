"""Parquet tables, read by pyarrow.parquet — the one reader of a Parquet table, in memory (`rows`:
each row placed by its number) and streamed (`columns` from the footer, `batches`: a shard read a
record batch at a time). The columns as stored (always UTF-8: `encoding` is not used). Imports
pyarrow only.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

from workers.data.formats.rows import MISSING, Opener, Row, listed, values
from workers.errors import DataError, first_line

SUFFIXES = (".parquet",)
TYPED = True  # values as stored: a column of digit strings holds names, not class ids
ENCODED = False  # always UTF-8, whatever data.encoding says
NO_ROWS = "no rows"  # what an empty file's refusal says it holds
BATCH_ROWS = 8192  # rows of a Parquet record batch


def columns(open_source: Opener, suffix: str, encoding: str) -> tuple[list[str], bool]:
    """A Parquet file's column names and whether it holds a row, from its footer."""
    metadata = pq.read_metadata(open_source())
    return list(metadata.schema.names), metadata.num_rows > 0


def table(source: Any, names: list[str]) -> Any:
    """The columns `names`, whole."""
    return pq.read_table(source, columns=names)


def batches(open_source: Opener, suffix: str, encoding: str, columns: list[str]) -> Iterator[Any]:
    """The `columns` as record batches of BATCH_ROWS rows, read in turn (bounded memory)."""
    yield from pq.ParquetFile(open_source()).iter_batches(batch_size=BATCH_ROWS, columns=columns)


def column(path: Any, suffix: str, encoding: str, name: str) -> tuple[list[Any] | None, list[str]]:
    """Every value of column `name` of a local file, in row order (None: no such column), and its columns."""
    names, _ = columns(lambda: path, suffix, encoding)
    return (values(table(path, [name]), name) if name in names else None), names


def rows(
    path: object, raw: bytes, suffix: str, encoding: str, text_column: str, label_column: str, problems: list[str]
) -> tuple[list[Row], str | None]:
    """A Parquet file's text and label columns (its bytes `raw`, read whole: the in-memory reader),
    each row placed by its number, and None (pyarrow's refusal is a DataError here); a missing
    column is one of `problems`, an unreadable file a DataError."""
    try:
        names, _ = columns(lambda: pa.BufferReader(raw), suffix, encoding)
        present = [c for c in (text_column, label_column) if c in names]
        problems += [
            f"{path}: no column {c!r}; the columns are {listed(names)}"
            for c in (text_column, label_column)
            if c not in names
        ]
        read = table(pa.BufferReader(raw), present)
    except (pa.ArrowException, OSError) as e:
        raise DataError(f"{path}: cannot read Parquet ({first_line(e)})") from None

    def cells(name: str) -> list[object]:
        return values(read, name) if name in present else [MISSING] * read.num_rows

    texts, labels = cells(text_column), cells(label_column)
    return [(f"row {i}", text, label) for i, (text, label) in enumerate(zip(texts, labels), start=1)], None
