"""What Ray Data's reading tasks run on a text table's shards: read a shard's record batches with its
format's reader (workers/data/formats/: the one the in-memory loader uses too), keep the rows of one
split, tokenize them. Imports numpy, pyarrow, tokenizers and the torch-free modules of workers/ only
(keys, tokenizer, input_spec, formats, errors): a reading task of a streamed text source loads no
torch (about 300 MB per reading process; tests/test_layout.py checks it), as image_tasks.py does for
images. table_streams.py and image_streams.py build the streams from these.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from workers.data.formats.rows import values
from workers.data.formats.tables import table_format
from workers.data.input_spec import InputSpec
from workers.data.keys import key_ids, split_codes, text_keys
from workers.data.selection import ALL, Selection
from workers.errors import DataError
from workers.storage import checksum, open_input

INTERLEAVED = 16  # shards one reading task of an epoch reads at once, their batches mixed


@dataclass(frozen=True)
class Shards:
    """The files of one text table, in sorted order, and how to read them."""

    files: tuple[str, ...]
    suffix: str  # .csv, .tsv, .jsonl or .parquet
    text_column: str
    label_column: str
    encoding: str = "utf-8"
    checksums: tuple[tuple[int, str], ...] = ()  # each file's size and checksum (sha256; on S3 its ETag)
    id_column: str | None = None  # the column naming each sample (None: its stripped text)

    @property
    def columns(self) -> list[str]:
        """The columns a reading task reads: the text, the label and the id column if named."""
        return [self.text_column, self.label_column, *([self.id_column] if self.id_column else [])]


@dataclass(frozen=True)
class TableReading:
    """What a reading task needs of one split of a table: its shards, which split, and how raw
    labels become class ids (what travels to the task, instead of the split's label array)."""

    shards: Shards
    split: int
    fractions: tuple[float, float]
    classes: tuple[str, ...]
    named: bool  # labels are class names (else integer ids)
    selection: Selection = ALL  # the split's subset and limit (workers/data/selection.py)

    def label_ids(self, raw: list[Any]) -> np.ndarray:
        """Class ids of raw labels as the scan read them: names by the class list, integers as given."""
        if self.named:
            index = {name: i for i, name in enumerate(self.classes)}
            return np.array([index[str(label).strip()] for label in raw], dtype=np.int64)
        return np.array([int(label) for label in raw], dtype=np.int64)


def row_ids(table: Any, shards: Shards) -> np.ndarray:
    """int64 id of each row of a pyarrow batch: of its value in the id column, else of its
    stripped text (workers/data/keys.py)."""
    if shards.id_column is not None:
        keys = ["" if v is None else str(v).strip() for v in table.column(shards.id_column).to_pylist()]
    else:
        keys = text_keys([t if isinstance(t, str) else "" for t in table.column(shards.text_column).to_pylist()])
    return key_ids(keys)


def rows_of(table: Any, reading: TableReading) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """(texts, class ids, mask of the rows the split keeps, ids) of a pyarrow batch: a row is kept
    when its id falls in the split and the split's selection keeps it."""
    texts = table.column(reading.shards.text_column).to_pylist()
    labels = reading.label_ids(table.column(reading.shards.label_column).to_pylist())
    ids = row_ids(table, reading.shards)
    keep = (split_codes(ids, *reading.fractions) == reading.split) & reading.selection.mask(ids, labels)
    return texts, labels, keep, ids


def shard_rows(
    files: dict[str, np.ndarray], reading: TableReading, inputs: InputSpec
) -> Iterator[dict[str, np.ndarray]]:
    """Each named shard's rows of the split, encoded (`text_rows`), one record batch at a time: the
    function `map_batches` runs. A shard whose checksum is not the one preflight took is refused
    (`check_unchanged`): its rows would not be the ones the splits and labels were made from."""
    for file in files["file"]:
        check_unchanged(reading.shards, str(file))
        for table in shard_batches(reading.shards, str(file)):
            yield text_rows(table, reading, inputs)


def interleaved_rows(
    files: dict[str, np.ndarray], reading: TableReading, inputs: InputSpec, mix_seed: int
) -> Iterator[dict[str, np.ndarray]]:
    """The split's rows of up to INTERLEAVED shards read at once, the function an epoch's
    `map_batches` runs: one record batch of each shard in turn, encoded, put together and
    shuffled (seeded by `mix_seed` and the shards' places), so every block a task yields mixes all its
    shards whatever order each one is sorted in. Memory: one record batch per shard."""
    names = [str(file) for file in files["file"]]
    for name in names:
        check_unchanged(reading.shards, name)
    streams = [shard_batches(reading.shards, name) for name in names]
    # seeded by the shards' places in the listing, not their paths: the same data elsewhere reads the same
    generator = np.random.default_rng([mix_seed, *(reading.shards.files.index(name) for name in names)])
    while streams:
        parts, left = [], []
        for stream in streams:
            table = next(stream, None)
            if table is not None:
                parts.append(text_rows(table, reading, inputs))
                left.append(stream)
        streams = left
        rows = {name: np.concatenate([part[name] for part in parts]) for name in parts[0]} if parts else None
        if rows is not None and len(rows["id"]):
            order = generator.permutation(len(rows["id"]))
            yield {name: column[order] for name, column in rows.items()}


def check_unchanged(shards: Shards, file: str) -> None:
    """DataError unless `file` has the size and checksum `shards` recorded for it."""
    if not shards.checksums:
        return
    expected = shards.checksums[shards.files.index(file)]
    try:
        found = checksum(file)
    except OSError as e:
        raise DataError(f"{file}: cannot read ({e})") from None
    if found != expected:
        raise DataError(
            f"{file}: the shard changed after preflight (size {found[0]}, was {expected[0]}; checksum differs); "
            "its rows no longer match the splits and labels the run was planned on: run again"
        )


def text_rows(table: Any, reading: TableReading, inputs: InputSpec) -> dict[str, np.ndarray]:
    """A read batch's rows of the split: ids, token ids padded to max_length, lengths, class ids."""
    from workers.data.tokenizer import encode_token_arrays

    texts, labels, keep, ids = rows_of(table, reading)
    chosen = [t for t, k in zip(texts, keep) if k]
    tokens, lengths = encode_token_arrays(inputs, chosen)
    values = np.zeros((len(chosen), inputs.max_length), dtype=np.int32)
    values[:, : tokens.shape[1]] = tokens
    return {
        "id": ids[keep],
        "values": values,
        "length": lengths,
        "label": labels[keep],
        "text": np.array(chosen, dtype=object),
    }


def shard_batches(shards: Shards, file: str) -> Iterator[Any]:
    """One shard's text and label columns as pyarrow record batches, read in turn by its format's
    reader (bounded memory: a Parquet or CSV shard streams; a JSONL shard is read whole, one shard at
    a time)."""
    reader = table_format(shards.suffix)
    yield from reader.batches(lambda: open_input(file), shards.suffix, shards.encoding, shards.columns)


def scan_rows(table: Any, shards: Shards, file: str) -> tuple[list[str], list[str], bool]:
    """A batch's texts and labels (as text; and whether the column holds integers), each row checked:
    a text that is missing or blank, or a missing label, is a DataError naming the file."""
    import pyarrow as pa  # type: ignore[import-untyped]

    texts = values(table, shards.text_column)
    raw = values(table, shards.label_column)
    for text, label in zip(texts, raw):
        if not isinstance(text, str) or not text.strip():
            raise DataError(f"{file}: a row whose {shards.text_column!r} is empty or not a string")
        if label is None or (isinstance(label, str) and not label.strip()):
            raise DataError(f"{file}: a row without a label in column {shards.label_column!r}")
    integer = pa.types.is_integer(table.schema.field(shards.label_column).type)
    return texts, [str(label).strip() for label in raw], integer
