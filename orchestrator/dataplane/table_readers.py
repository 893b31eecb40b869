"""What Ray Data's reading tasks run on a text table's shards: read a shard's record batches, keep
the rows of one split, tokenize them. Imports numpy, pyarrow, tokenizers and the torch-free modules
of workers/ only (keys, tokenizer, input_spec, tables, errors): a reading task of a streamed text source
loads no torch (about 300 MB per reading process; tests/test_layout.py checks it), as
image_readers.py does for images. table_streams.py and image_streams.py build the streams from these.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from orchestrator.dataplane.objects import open_input
from workers.data import tables
from workers.data.input_spec import InputSpec
from workers.data.keys import key_hashes, sample_ids, split_codes, text_keys
from workers.errors import DataError
from workers.names import is_s3

READ_BATCH = 1024  # rows a read task splits, tokenizes or decodes at a time


@dataclass(frozen=True)
class Shards:
    """The files of one text table, in sorted order, and how to read them."""

    files: tuple[str, ...]
    suffix: str  # .csv, .tsv, .jsonl or .parquet
    text_column: str
    label_column: str
    encoding: str = "utf-8"
    checksums: tuple[tuple[int, str], ...] | None = None  # S3: each file's size and ETag, from its listing


@dataclass(frozen=True)
class TableReading:
    """What a reading task needs of one split of a table: its shards, which split, and how raw
    labels become class ids (what travels to the task, instead of the split's label array)."""

    shards: Shards
    split: int
    fractions: tuple[float, float]
    classes: tuple[str, ...]
    named: bool  # labels are class names (else integer ids)

    def label_ids(self, raw: list[Any]) -> np.ndarray:
        """Class ids of raw labels as the scan read them: names by the class list, integers as given."""
        if self.named:
            index = {name: i for i, name in enumerate(self.classes)}
            return np.array([index[str(label).strip()] for label in raw], dtype=np.int64)
        return np.array([int(label) for label in raw], dtype=np.int64)


def opened(file: str) -> Any:
    """What pyarrow reads `file` from: its path, or an S3 object's pyarrow file."""
    return open_input(file) if is_s3(file) else file


def rows_of(table: Any, reading: TableReading) -> tuple[list[str], list[Any], np.ndarray, np.ndarray]:
    """(texts, raw labels, mask of the rows in the split, every row's key hash) of a pyarrow batch."""
    texts = table.column(reading.shards.text_column).to_pylist()
    raw = table.column(reading.shards.label_column).to_pylist()
    hashes = key_hashes(text_keys([t if isinstance(t, str) else "" for t in texts]))
    return texts, raw, split_codes(hashes, *reading.fractions) == reading.split, hashes


def shard_rows(
    files: dict[str, np.ndarray], reading: TableReading, inputs: InputSpec
) -> Iterator[dict[str, np.ndarray]]:
    """Each named shard's rows of the split, encoded (`text_rows`), one record batch at a time: the
    function `map_batches` runs."""
    for file in files["file"]:
        for table in shard_batches(reading.shards, str(file)):
            yield text_rows(table, reading, inputs)


def text_rows(table: Any, reading: TableReading, inputs: InputSpec) -> dict[str, np.ndarray]:
    """A read batch's rows of the split: ids, token ids padded to max_length, lengths, class ids."""
    from workers.data.tokenizer import encode_token_arrays

    texts, raw, keep, hashes = rows_of(table, reading)
    chosen = [t for t, k in zip(texts, keep) if k]
    ids, lengths = encode_token_arrays(inputs, chosen)
    values = np.zeros((len(chosen), inputs.max_length), dtype=np.int32)
    values[:, : ids.shape[1]] = ids
    return {
        "id": sample_ids(hashes[keep]),
        "values": values,
        "length": lengths,
        "label": reading.label_ids([r for r, k in zip(raw, keep) if k]),
        "text": np.array(chosen, dtype=object),
    }


def shard_batches(shards: Shards, file: str) -> Iterator[Any]:
    """One shard's text and label columns as pyarrow record batches, read in turn by
    workers/data/tables.py's readers (bounded memory: a Parquet or CSV shard streams; a JSONL shard
    is read whole, one shard at a time)."""
    columns = [shards.text_column, shards.label_column]
    if shards.suffix == ".parquet":
        yield from tables.parquet_batches(opened(file), columns)
    elif shards.suffix == ".jsonl":
        yield from tables.json_table(opened(file), shards.encoding).select(columns).to_batches(READ_BATCH * 8)
    else:
        yield from tables.csv_batches(lambda: opened(file), shards.suffix, shards.encoding, columns)


def scan_rows(table: Any, shards: Shards, file: str) -> tuple[list[str], list[str], bool]:
    """A batch's texts and labels (as text; and whether the column holds integers), each row checked:
    a text that is missing or blank, or a missing label, is a DataError naming the file."""
    import pyarrow as pa  # type: ignore[import-untyped]

    texts = tables.values(table, shards.text_column)
    raw = tables.values(table, shards.label_column)
    for text, label in zip(texts, raw):
        if not isinstance(text, str) or not text.strip():
            raise DataError(f"{file}: a row whose {shards.text_column!r} is empty or not a string")
        if label is None or (isinstance(label, str) and not label.strip()):
            raise DataError(f"{file}: a row without a label in column {shards.label_column!r}")
    integer = pa.types.is_integer(table.schema.field(shards.label_column).type)
    return texts, [str(label).strip() for label in raw], integer
