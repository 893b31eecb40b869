"""CSV and TSV tables, read by pyarrow.csv with the options this module sets — the one reader of a
delimited table, in memory (`rows`: each row placed at its line, for refusals that name it) and
streamed (`columns` from the header, `batches`: a shard read a block at a time by Ray Data's reading
tasks).

- CSV: RFC 4180 quoting (a quoted value may hold the delimiter, doubled quotes and line breaks);
  TSV as IANA defines it: no quoting, a quote is a character. Blank lines are skipped. Every column
  is read as a string (no type inference: "007" and "1.0" stay as written), in the table's
  `encoding`.
- A header's names are compared stripped of surrounding whitespace and a byte-order mark (`named`).

Imports pyarrow only (a streamed reading task loads no torch). Errors are pyarrow's: each caller
words its own, but for `rows`, which words the in-memory reader's.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.csv as pacsv  # type: ignore[import-untyped]

from workers.data.formats.rows import MISSING, Opener, Row, listed, values
from workers.errors import DataError, first_line

SUFFIXES = (".csv", ".tsv")
DIALECTS = {".csv": (",", True), ".tsv": ("\t", False)}  # each suffix's delimiter and whether values are quoted
TYPED = False  # every value a string: a label column of digit strings holds class ids
ENCODED = True  # in data.encoding
NO_ROWS = "a header and no rows"  # what an empty file's refusal says it holds
BLOCK_BYTES = 1 << 22  # what pyarrow.csv parses at a time
InvalidRowHandler = Callable[[Any], str]


def options(
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
    delimiter, quoted = DIALECTS[suffix]
    read = pacsv.ReadOptions(encoding=encoding, block_size=block_size, use_threads=False)
    parse = pacsv.ParseOptions(
        delimiter=delimiter,
        quote_char='"' if quoted else False,
        double_quote=quoted,
        newlines_in_values=quoted,
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


def header(open_source: Opener, suffix: str, encoding: str) -> tuple[list[str], bool]:
    """A .csv or .tsv file's column names as its header writes them, and whether a row follows it
    (pyarrow reads the first block only; a row of the wrong width is the rows' reader's to report)."""
    read, parse, convert = options(suffix, encoding, invalid_row=lambda row: "skip", block_size=1 << 20)
    reader = pacsv.open_csv(open_source(), read_options=read, parse_options=parse, convert_options=convert)
    names = list(reader.schema.names)
    for batch in reader:
        if batch.num_rows:
            return names, True
    return names, False


def columns(open_source: Opener, suffix: str, encoding: str) -> tuple[list[str], bool]:
    """A .csv or .tsv file's column names as matched (`bare`), and whether a row follows its header."""
    names, has_rows = header(open_source, suffix, encoding)
    return stripped(names), has_rows


def bare(name: str) -> str:
    """A header name without surrounding whitespace or a byte-order mark: what columns are matched by."""
    return name.strip().lstrip("\ufeff").strip()


def named(names: list[str], wanted: str) -> str | None:
    """The name in `names` that is `wanted` once `bare`."""
    return next((name for name in names if bare(name) == wanted), None)


def stripped(names: list[str]) -> list[str]:
    return [bare(name) for name in names]


def batches(open_source: Opener, suffix: str, encoding: str, columns: list[str]) -> Iterator[Any]:
    """A .csv or .tsv file's `columns` (names as compared by `named`; each one in the header) as
    record batches of strings, named as asked."""
    yield from _batches(open_source, suffix, encoding, columns)


def _batches(
    open_source: Opener,
    suffix: str,
    encoding: str,
    columns: list[str],
    invalid_row: InvalidRowHandler | None = None,
    head: list[str] | None = None,
) -> Iterator[Any]:
    """`batches`, with pyarrow's handler of a ragged row and the header's names (`head`) if read already."""
    names = head if head is not None else header(open_source, suffix, encoding)[0]
    raw = [named(names, column) or column for column in columns]
    read, parse, convert = options(suffix, encoding, raw, invalid_row)
    for batch in pacsv.open_csv(open_source(), read_options=read, parse_options=parse, convert_options=convert):
        yield batch.rename_columns(columns) if raw != columns else batch


LINE_BREAK = r"\r\n|\r|\n"  # what ends a line, as Python's universal newlines and pyarrow.csv have it


def line_breaks(table: Any, column: str) -> list[int]:
    """The line breaks inside each value of a string column (a quoted CSV value may hold some)."""
    import pyarrow.compute as pc  # type: ignore[import-untyped]

    return pc.count_substring_regex(table.column(column), LINE_BREAK).fill_null(0).to_pylist()


def line_breaks_in(text: str) -> int:
    return len(re.findall(LINE_BREAK, text))


def rows(
    path: object, raw: bytes, suffix: str, encoding: str, text_column: str, label_column: str, problems: list[str]
) -> tuple[list[Row], str | None]:
    """A CSV or TSV file's rows (its bytes `raw`, read whole: the in-memory reader), every column a
    string (`options`), each placed at the line it starts on, and None (pyarrow's refusal is a
    DataError here); a missing column is one of `problems`, a ragged row or unreadable file a
    DataError naming its line."""
    kind = suffix.removeprefix(".").upper()  # CSV, TSV
    ragged: list[Any] = []  # the first row whose field count differs from the header's

    def invalid(row: Any) -> str:
        if not ragged:
            ragged.append(row)
        return "skip"

    try:
        head, _ = header(lambda: pa.BufferReader(raw), suffix, encoding)
        names = stripped(head)
        problems += [
            f"{path}: no column {c!r}; the columns are {listed(names)}"
            for c in (text_column, label_column)
            if c not in names
        ]
        read = _batches(lambda: pa.BufferReader(raw), suffix, encoding, names, invalid, head)
        table = pa.Table.from_batches(list(read), schema=pa.schema([(n, pa.string()) for n in names]))
    except pa.ArrowInvalid as e:
        if not ragged:
            raise DataError(f"{path}: not valid {kind} ({first_line(e)})") from None
        row = ragged[0]  # placed by pyarrow's row count: the rows before it were not all read
        raise DataError(
            f"{path}: line {row.number}: {row.actual_columns} fields, the header has {row.expected_columns}"
        ) from None
    breaks = [sum(counts) for counts in zip(*(line_breaks(table, n) for n in names))] if names else []
    first = 2 + sum(line_breaks_in(name) for name in head)  # the line the first row starts on
    lines = list(itertools.accumulate(breaks, lambda line, extra: line + extra + 1, initial=first))
    if ragged:
        row = ragged[0]
        line = lines[row.number - 2]  # the rows before it all have the header's fields
        joined = line_breaks_in(row.text)
        hint = f" (an unclosed quote joins lines {line}–{line + joined}?)" if joined else ""
        raise DataError(
            f"{path}: line {line}: {row.actual_columns} fields, the header has {row.expected_columns}{hint}"
        )

    def cells(name: str) -> list[object]:
        return values(table, name) if name in names else [MISSING] * table.num_rows

    texts, labels = cells(text_column), cells(label_column)
    return [(f"line {line}", text, label) for line, text, label in zip(lines, texts, labels)], None


def column(path: Any, suffix: str, encoding: str, name: str) -> tuple[list[Any] | None, list[str]]:
    """Every value of column `name` of a local file, in row order (None: the file has no such
    column), and the file's columns; pyarrow's errors as they come."""
    found, _ = header(lambda: pa.OSFile(str(path)), suffix, encoding)
    names = stripped(found)
    if name not in names:
        return None, names
    read = _batches(lambda: pa.OSFile(str(path)), suffix, encoding, [name], None, found)
    return [value for batch in read for value in batch.column(0).to_pylist()], names
