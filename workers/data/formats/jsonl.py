"""JSON Lines tables, read by pyarrow.json — the one reader of a JSONL table, in memory (`rows`: each
row placed at its line, and where pyarrow refuses the file, its lines read one by one to say which
breaks what) and streamed (`columns`, `batches`: a shard read whole, one shard at a time).

One JSON object per line, blank lines skipped, types as JSON gives them; pyarrow.json reads UTF-8
only, so a file in another encoding is decoded with Python's codec first. Imports pyarrow only.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.json as pajson  # type: ignore[import-untyped]

from workers.data.formats.rows import MISSING, Opener, Row, json_type, listed, values
from workers.errors import DataError, first_line

SUFFIXES = (".jsonl",)
TYPED = True  # types as JSON gives them: a label of digit strings is a name, not a class id
ENCODED = True  # in data.encoding
NO_ROWS = "no rows"  # what an empty file's refusal says it holds
BATCH_ROWS = 8192  # rows of a streamed shard's record batch


def table(source: Any, encoding: str = "utf-8") -> Any:
    """A .jsonl file as a pyarrow table, every key a column (types inferred: JSON's)."""
    if encoding.replace("_", "-").lower() not in ("utf-8", "utf8"):
        if hasattr(source, "read"):
            raw = source.read()
        else:
            with open(source, "rb") as f:
                raw = f.read()
        source = io.BytesIO(raw.decode(encoding).encode("utf-8"))
    return pajson.read_json(source)


def columns(open_source: Opener, suffix: str, encoding: str) -> tuple[list[str], bool]:
    """A .jsonl file's keys, as its first block shows them (its first records), and whether it holds
    a record (pyarrow refuses a file without one as "Empty JSON")."""
    try:
        if encoding.replace("_", "-").lower() not in ("utf-8", "utf8"):
            return list(table(open_source(), encoding).schema.names), True
        return list(pajson.open_json(open_source()).schema.names), True
    except pa.ArrowInvalid as e:
        if "Empty JSON" in str(e):
            return [], False
        raise


def batches(open_source: Opener, suffix: str, encoding: str, columns: list[str]) -> Iterator[Any]:
    """A shard's `columns` as record batches (the shard is read whole: one shard at a time)."""
    yield from table(open_source(), encoding).select(columns).to_batches(BATCH_ROWS)


def column(path: Any, suffix: str, encoding: str, name: str) -> tuple[list[Any] | None, list[str]]:
    """Every value of key `name` of a local file, in line order (None: no such key), and its keys."""
    read = table(path, encoding)
    names = list(read.schema.names)
    return (values(read, name) if name in names else None), names


def rows(
    path: object, raw: bytes, suffix: str, encoding: str, text_column: str, label_column: str, problems: list[str]
) -> tuple[list[Row], str | None]:
    """A JSONL file's rows (its bytes `raw`, read whole and valid in `encoding`: the in-memory
    reader), read by pyarrow.json, each placed at its line; and None. Where pyarrow refuses the file,
    or its columns are not what the label rule takes (a string text; integer or string labels, none
    missing), the lines are read one by one with Python's json (`diagnosis`) so that the caller can
    say which line breaks what: then the rows so read, and pyarrow's refusal."""
    content = raw.decode(encoding).removeprefix("\ufeff")
    try:
        read = table(pa.BufferReader(raw), encoding)
    except (pa.ArrowInvalid, UnicodeDecodeError) as e:
        return diagnosis(path, content, text_column, label_column, problems, first_line(e))
    names = list(read.schema.names)
    text_ok = text_column in names and pa.types.is_string(read.schema.field(text_column).type)
    label_type = read.schema.field(label_column).type if label_column in names else None
    label_ok = label_type is not None and (pa.types.is_string(label_type) or pa.types.is_int64(label_type))
    if not (text_ok and label_ok) or read.column(text_column).null_count or read.column(label_column).null_count:
        return diagnosis(path, content, text_column, label_column, problems, "unexpected columns")
    lines = [number for number, line in enumerate(content.split("\n"), start=1) if line.strip()]
    texts, labels = values(read, text_column), values(read, label_column)
    return [(f"line {line}", text, label) for line, text, label in zip(lines, texts, labels)], None


def diagnosis(
    path: object, content: str, text_column: str, label_column: str, problems: list[str], refusal: str
) -> tuple[list[Row], str]:
    """A JSONL file pyarrow would not read as the label rule wants, its lines read with Python's json:
    its rows (a missing key is one of `problems`, once per key) and pyarrow's `refusal`; a line
    that is not JSON, or not an object, is a DataError naming it."""
    found: list[Row] = []
    reported: set[str] = set()
    for number, line in enumerate(content.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{path}: line {number}: not valid JSON ({e.msg} at column {e.colno})") from None
        if not isinstance(record, dict):
            raise DataError(f"{path}: line {number}: expected a JSON object, got {json_type(record)}")
        for column in (text_column, label_column):
            if column not in record and column not in reported:
                reported.add(column)  # once per key: the first line without it
                problems.append(f"{path}: line {number}: no key {column!r}; the keys are {listed(list(record))}")
        found.append((f"line {number}", record.get(text_column, MISSING), record.get(label_column, MISSING)))
    return found, refusal
