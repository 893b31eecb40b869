"""Token ids kept after a streamed text split's first epoch, so later epochs neither read the shards
nor tokenize them again (what bounded streamed text at half the in-memory path's speed: the
readers' tokenizing and Ray Data's hand-over, per sample and per epoch; docs/benchmarks/index.md).

- **What is kept**: the rows of the first epoch as the reading tasks made them — id, token ids cut
  to their length, length, label and text — in an Arrow IPC file (pyarrow) in an unnamed temporary
  file of the consuming process (gone when it closes or dies), written in blocks of `CACHE_BLOCK`
  rows as the epoch passes and memory-mapped once it is complete: page cache the kernel may drop
  and read again, not the process's memory. On disk: about 4 bytes a token plus the text.
- **A later epoch's order**: a permutation of every kept row, seeded by (seed, epoch), served in
  windows of WINDOW_ROWS of its positions: each window's rows are gathered from wherever they lie in
  the file (one sorted `take` over the memory map, then put in the permutation's order) and are the
  only part held in memory (a few MB), the rest stays on disk. A gather per window rather than per
  batch: 0.35 s against 24 s an epoch of 400,000 rows in 64-row batches.
- **Reruns and resumes**: the file's layout is the first epoch's stream order, which a rerun with
  the same seed reproduces (table_streams.py). A run resumed at a later epoch, whose process has no file,
  reads the first epoch's stream once into it (without training), then serves the epoch: it sees
  the batches an uninterrupted run would.
- A file that cannot be written (a full disk) is dropped with one warning; the epochs then stream.

Lance (`pylance`: random access by row id) would also hold it; a local, per-process file that is
written once and read by blocks needs nothing pyarrow's IPC files do not give (random access to
each block, zero-copy reads of a memory map), so no dependency is added.
"""

from __future__ import annotations

import logging
import mmap
import tempfile
from collections.abc import Iterator
from typing import IO, Any

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]

CACHE_BLOCK = 2048  # rows in one block of the file
WINDOW_ROWS = 1 << 16  # positions of a later epoch's permutation gathered at once
COLUMNS = ("id", "values", "length", "label", "text")  # the reading tasks' columns (table_tasks.text_rows)
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("values", pa.list_(pa.int32())),
        ("length", pa.int64()),
        ("label", pa.int64()),
        ("text", pa.string()),
    ]
)

log = logging.getLogger(__name__)

Rows = dict[str, np.ndarray]


def ragged(values: np.ndarray, lengths: np.ndarray) -> pa.ListArray:
    """Each row of right-padded token ids N×L cut to its length, as one Arrow list array."""
    keep = np.arange(values.shape[1])[None, :] < lengths[:, None]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values[keep].astype(np.int32)))


def padded(lists: pa.Array | pa.ChunkedArray, lengths: np.ndarray) -> np.ndarray:
    """Token-id lists as int32 N×L right-padded with 0, L the longest (at least 1)."""
    flat = lists.combine_chunks() if isinstance(lists, pa.ChunkedArray) else lists
    tokens = flat.flatten().to_numpy(zero_copy_only=False)
    width = max(1, int(lengths.max())) if len(lengths) else 1
    out = np.zeros((len(lengths), width), dtype=np.int32)
    out[np.arange(width)[None, :] < lengths[:, None]] = tokens
    return out


def concat(parts: list[Rows]) -> Rows:
    """Rows of several parts, in order; token ids padded to the widest."""
    if len(parts) == 1:
        return parts[0]
    width = max(part["values"].shape[1] for part in parts)
    out = {name: np.concatenate([part[name] for part in parts]) for name in COLUMNS if name != "values"}
    out["values"] = np.concatenate([np.pad(p["values"], ((0, 0), (0, width - p["values"].shape[1]))) for p in parts])
    return out


def take(rows: Rows, window: slice | np.ndarray) -> Rows:
    return {name: column[window] for name, column in rows.items()}


class TokenCache:
    """One split's first epoch kept for the later ones (module docstring), for one key: the seed,
    the tokenizer's digest and the batch size that made the epoch's order."""

    def __init__(self, key: tuple[Any, ...]) -> None:
        self.key = key
        self.file: IO[bytes] | None = tempfile.TemporaryFile(prefix="congruent-tokens-")
        self.writer: Any = pa.ipc.new_file(self.file, SCHEMA)
        self.pending: list[Rows] = []
        self.reader: Any = None
        self.memory: mmap.mmap | None = None
        self.rows = 0
        self.dropped = False  # the file could not be written: the epochs stream

    @property
    def complete(self) -> bool:
        return self.reader is not None

    def add(self, rows: Rows) -> None:
        """Keep a batch of the first epoch's rows (numpy columns as the readers made them)."""
        if self.writer is None:
            return
        self.pending.append({name: rows[name] for name in COLUMNS})
        self.rows += len(rows["id"])
        while sum(len(part["id"]) for part in self.pending) >= CACHE_BLOCK:
            whole = concat(self.pending)
            self._write(take(whole, slice(0, CACHE_BLOCK)))
            if self.writer is None:
                return
            rest = take(whole, slice(CACHE_BLOCK, None))
            self.pending = [rest] if len(rest["id"]) else []

    def finish(self) -> bool:
        """Close the file once the epoch has passed whole and map it; False if it could not be kept."""
        if self.writer is None:
            return False
        if self.pending:
            self._write(concat(self.pending))
        if self.writer is None:
            return False
        self.pending = []
        try:
            self.writer.close()
            assert self.file is not None
            self.file.flush()
            self.memory = mmap.mmap(self.file.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as e:
            self._drop(e)
            return False
        self.reader = pa.ipc.open_file(pa.py_buffer(self.memory))
        return True

    def _write(self, rows: Rows) -> None:
        if self.writer is None:
            return
        columns = [
            pa.array(rows["id"].astype(np.int64)),
            ragged(rows["values"], rows["length"]),
            pa.array(rows["length"].astype(np.int64)),
            pa.array(rows["label"].astype(np.int64)),
            pa.array(list(rows["text"]), pa.string()),
        ]
        try:
            self.writer.write_batch(pa.RecordBatch.from_arrays(columns, schema=SCHEMA))
        except OSError as e:
            self._drop(e)

    def _drop(self, error: OSError) -> None:
        log.warning("cannot keep the first epoch's token ids on disk (%s); later epochs read the stream", error)
        self.close()
        self.dropped = True

    def close(self) -> None:
        self.writer, self.reader, self.pending = None, None, []
        if self.memory is not None:
            self.memory.close()
            self.memory = None
        if self.file is not None:
            self.file.close()
            self.file = None

    @staticmethod
    def _rows(batch: Any) -> Rows:
        lengths = batch.column("length").to_numpy()
        return {
            "id": batch.column("id").to_numpy(),
            "values": padded(batch.column("values"), lengths),
            "length": lengths,
            "label": batch.column("label").to_numpy(),
            "text": np.array(batch.column("text").to_pylist(), dtype=object),
        }

    def batches(self, batch_size: int, order: int | None) -> Iterator[Rows]:
        """The kept rows in batches of `batch_size` (the last one shorter): as the first epoch read
        them (`order` None), or in the permutation seeded by `order` (module docstring)."""
        if order is None:
            windows: Iterator[Rows] = (
                self._rows(self.reader.get_batch(i)) for i in range(self.reader.num_record_batches)
            )
        else:
            windows = self._permuted(np.random.default_rng(order))
        left: list[Rows] = []
        for window in windows:
            rows = concat(left + [window])
            n = len(rows["id"])
            full = n - n % batch_size
            for begin in range(0, full, batch_size):
                yield take(rows, slice(begin, begin + batch_size))
            left = [take(rows, slice(full, None))] if full < n else []
        if left:
            yield left[0]

    def _permuted(self, generator: np.random.Generator) -> Iterator[Rows]:
        """Every kept row in a permutation drawn by `generator`, WINDOW_ROWS at a time."""
        table = self.reader.read_all()  # zero-copy over the memory map
        permutation = generator.permutation(table.num_rows)
        for start in range(0, len(permutation), WINDOW_ROWS):
            positions = permutation[start : start + WINDOW_ROWS]
            ascending = np.argsort(positions, kind="stable")
            gathered = table.take(positions[ascending])  # read in file order
            back = np.empty_like(ascending)
            back[ascending] = np.arange(len(ascending))
            yield self._rows(gathered.take(back).combine_chunks())
