"""The one reader of a text table's files: CSV and TSV through pyarrow.csv, JSONL through
pyarrow.json, Parquet through pyarrow.parquet, each with the options this module sets. Both ways
of reading a text dataset go through it: in memory (workers/data/text_tables.py, `read_text_table`) and
streamed by Ray Data's reading tasks (orchestrator/dataplane/table_readers.py, table_streams.py).

The options, per format:

- CSV: RFC 4180 quoting (a quoted value may hold the delimiter, doubled quotes and line breaks);
  TSV as IANA defines it: no quoting, a quote is a character. Blank lines are skipped. Every column
  is read as a string (no type inference: "007" and "1.0" stay as written), in the table's
  `encoding`.
- JSONL: one JSON object per line, blank lines skipped, types as JSON gives them; pyarrow.json
  reads UTF-8 only, so a file in another encoding is decoded with Python's codec first.
- Parquet: the columns as stored (always UTF-8).

A header's names are compared stripped of surrounding whitespace (`named`). Imports pyarrow only
(a streamed reading task loads no torch). Errors are pyarrow's: each caller words its own.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.csv as pacsv  # type: ignore[import-untyped]
import pyarrow.json as pajson  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

BLOCK_BYTES = 1 << 22  # what pyarrow.csv parses at a time
PARQUET_BATCH = 8192  # rows of a Parquet record batch

# What a reader opens: a path, a pyarrow file or a buffer. A CSV is opened twice (its header, then
# its rows), so the CSV functions take a function that opens it afresh.
Source = Any
Opener = Callable[[], Source]
InvalidRowHandler = Callable[[Any], str]


def csv_options(
    suffix: str,
    encoding: str,
    columns: list[str] | None = None,
    invalid_row: InvalidRowHandler | None = None,
    block_size: int = BLOCK_BYTES,
) -> tuple[Any, Any, Any]:
    """pyarrow.csv's (read, parse, convert) options for a .csv or .tsv file (module docstring);
    `columns`: the columns to read, each as strings (None: every column, types inferred, which only
    the header's reading uses); `invalid_row`: pyarrow's handler of a row whose field count differs
    from the header's."""
    tab = suffix == ".tsv"
    read = pacsv.ReadOptions(encoding=encoding, block_size=block_size, use_threads=False)
    parse = pacsv.ParseOptions(
        delimiter="\t" if tab else ",",
        quote_char=False if tab else '"',
        double_quote=not tab,
        newlines_in_values=not tab,
        ignore_empty_lines=True,
        invalid_row_handler=invalid_row,
    )
    if columns is None:
        return read, parse, pacsv.ConvertOptions()
    convert = pacsv.ConvertOptions(
        include_columns=columns,
        column_types={c: pa.string() for c in columns},
        strings_can_be_null=False,
        quoted_strings_can_be_null=False,
    )
    return read, parse, convert


def csv_header(open_source: Opener, suffix: str, encoding: str) -> tuple[list[str], bool]:
    """A .csv or .tsv file's column names as its header writes them, and whether a row follows it
    (pyarrow reads the first block only; a row of the wrong width is the rows' reader's to report)."""
    read, parse, convert = csv_options(suffix, encoding, invalid_row=lambda row: "skip", block_size=1 << 20)
    reader = pacsv.open_csv(open_source(), read_options=read, parse_options=parse, convert_options=convert)
    names = list(reader.schema.names)
    for batch in reader:
        if batch.num_rows:
            return names, True
    return names, False


def bare(name: str) -> str:
    """A header name without surrounding whitespace or a byte-order mark: what columns are matched by."""
    return name.strip().lstrip("\ufeff").strip()


def named(names: list[str], wanted: str) -> str | None:
    """The name in `names` that is `wanted` once `bare`."""
    return next((name for name in names if bare(name) == wanted), None)


def stripped(names: list[str]) -> list[str]:
    return [bare(name) for name in names]


def csv_batches(
    open_source: Opener,
    suffix: str,
    encoding: str,
    columns: list[str],
    invalid_row: InvalidRowHandler | None = None,
    header: list[str] | None = None,
) -> Iterator[Any]:
    """A .csv or .tsv file's `columns` (names as compared by `named`; each one in the header) as
    record batches of strings, named as asked; `header`: its names, if read already."""
    names = header if header is not None else csv_header(open_source, suffix, encoding)[0]
    raw = [named(names, column) or column for column in columns]
    read, parse, convert = csv_options(suffix, encoding, raw, invalid_row)
    for batch in pacsv.open_csv(open_source(), read_options=read, parse_options=parse, convert_options=convert):
        yield batch.rename_columns(columns) if raw != columns else batch


def json_table(source: Source, encoding: str = "utf-8") -> Any:
    """A .jsonl file as a pyarrow table, every key a column (types inferred: JSON's)."""
    if encoding.replace("_", "-").lower() not in ("utf-8", "utf8"):
        if hasattr(source, "read"):
            raw = source.read()
        else:
            with open(source, "rb") as f:
                raw = f.read()
        source = io.BytesIO(raw.decode(encoding).encode("utf-8"))
    return pajson.read_json(source)


def json_columns(source: Source, encoding: str = "utf-8") -> list[str]:
    """A .jsonl file's keys, as its first block shows them (its first records)."""
    if encoding.replace("_", "-").lower() not in ("utf-8", "utf8"):
        return list(json_table(source, encoding).schema.names)
    return list(pajson.open_json(source).schema.names)


def parquet_columns(source: Source) -> tuple[list[str], int]:
    """A Parquet file's column names and row count, from its footer."""
    metadata = pq.read_metadata(source)
    return list(metadata.schema.names), metadata.num_rows


def parquet_table(source: Source, columns: list[str]) -> Any:
    return pq.read_table(source, columns=columns)


def parquet_batches(source: Source, columns: list[str]) -> Iterator[Any]:
    yield from pq.ParquetFile(source).iter_batches(batch_size=PARQUET_BATCH, columns=columns)


def values(table: Any, column: str) -> list[Any]:
    """A column's values as Python objects (str, int, float, bool, None…)."""
    return table.column(column).to_pylist()


LINE_BREAK = r"\r\n|\r|\n"  # what ends a line, as Python's universal newlines and pyarrow.csv have it


def line_breaks(table: Any, column: str) -> list[int]:
    """The line breaks inside each value of a string column (a quoted CSV value may hold some)."""
    import pyarrow.compute as pc  # type: ignore[import-untyped]

    return pc.count_substring_regex(table.column(column), LINE_BREAK).fill_null(0).to_pylist()


def line_breaks_in(text: str) -> int:
    return len(re.findall(LINE_BREAK, text))


def id_values(path: Any, suffix: str, encoding: str, column: str) -> list[Any]:
    """Every value of `column` of a local table file in row order (the id column, read after the
    text and label columns were checked); DataError when the file has no such column."""
    from workers.errors import DataError, first_line

    try:
        if suffix == ".parquet":
            names, _ = parquet_columns(path)
            if column in names:
                return values(parquet_table(path, [column]), column)
        elif suffix == ".jsonl":
            table = json_table(path, encoding)
            names = list(table.schema.names)
            if column in names:
                return values(table, column)
        else:
            header, _ = csv_header(lambda: pa.OSFile(str(path)), suffix, encoding)
            names = stripped(header)
            if column in names:
                batches = csv_batches(lambda: pa.OSFile(str(path)), suffix, encoding, [column], None, header)
                return [value for batch in batches for value in batch.column(0).to_pylist()]
    except (pa.ArrowException, OSError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: cannot read ({first_line(e)})") from None
    raise DataError(f"{path}: no id column {column!r}; the columns are {', '.join(map(repr, names))}")
