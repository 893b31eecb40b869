"""Streamed sources on Ray Data: a directory (or glob) of text-table shards, or an ImageFolder tree,
split, read, decoded and tokenized on Ray's CPU workers in batches, so no process holds the dataset.

- **Splits without loading** (workers/data/keys.py): a sample's split is a hash of its key (a text's
  stripped content; an image's path relative to the root). An image tree is split from its file
  list alone; a table is scanned once (`open_table_stream`: every shard's text and label columns,
  streamed), which gives the class list and each split's labels — 8 bytes a sample, the only
  per-sample array anything keeps.
- **Reading** (`files_dataset`, ray_reading.py): a Ray dataset of the file names (`from_items`), each file read,
  tokenized or decoded by a `map_batches` task that reserves no CPU (`num_cpus=0`, at most READERS
  at once): the training task that consumes the stream holds its stage's CPUs, and Ray Data tasks
  that wait for a free CPU would wait for ever on a cluster the replicas fill (ray-project/ray#44687;
  a file-based `read_*` lists its files in a task of one CPU, which is why the names come from here).
- **Order** (`StreamedSplit.epoch`): the files in an order seeded by (seed, epoch); a text split's
  shards read INTERLEAVED at a time by one task that mixes one record batch of each into every block
  it yields (`interleaved_rows`: label-sorted shards train like shuffled ones, docs/benchmarks/index.md),
  then a seeded local shuffle buffer of SHUFFLE_ROWS rows, with Ray Data's `preserve_order` on, so a
  rerun with the same seed reads the same batches. A text split reads and tokenizes its shards in its
  first epoch only and keeps the rows for the later ones, each drawn in a permutation of the whole
  split (token_cache.py, which also says what a resumed run reads). Its tokenizer trains on texts
  drawn across every shard (`tokenizer_texts`). An image tree's files are permuted whole each
  epoch. Ray Data cannot resume inside an epoch (ray-project/ray#37633, #48224): a resumed run
  restarts the epoch its last checkpoint ended before, which is where Congruent's checkpoints are
  written anyway.
- **Augmentation** is not the stream's: the trainer draws each image's from (seed, epoch, id).

Every check that can fail before training (no files, an empty shard, a shard whose columns differ
from the first's, a missing column, one class) is one DataError line naming the file.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from orchestrator.dataplane.ray_reading import files_dataset, tensor
from orchestrator.dataplane.shuffle import shuffled_batches
from orchestrator.dataplane.table_tasks import (
    INTERLEAVED,
    Shards,
    TableReading,
    interleaved_rows,
    row_ids,
    rows_of,
    scan_rows,
    shard_batches,
    shard_rows,
)
from orchestrator.dataplane.token_cache import TokenCache
from workers.data.batches import Batch
from workers.data.formats.tables import table_format
from workers.data.input_spec import InputSpec
from workers.data.keys import EVAL, SPLIT_RULE, TOKENIZER_SEED, TRAIN, VAL, rank, split_codes
from workers.data.selection import ALL, Selection, split_selection
from workers.data.streamed import StreamedSplit, StreamedSplits, tokens_digest
from workers.errors import DataError, first_line
from workers.names import TEXT_FORMATS
from workers.storage import Listed, checksum, listing, open_input

SHUFFLE_BUFFER = 8  # batches in the local shuffle buffer of an epoch's order (at least)
SHUFFLE_ROWS = 16_384  # rows in it (token ids and text: a few MB), past the interleaved blocks
CHUNK_ROWS = 4096  # rows Ray Data hands the consuming process at a time during an epoch
SPLIT_CODES = {"train": TRAIN, "val": VAL, "eval": EVAL}


def table_shards(
    path: str, text_column: str, label_column: str, encoding: str = "utf-8", id_column: str | None = None
) -> Shards:
    """The shards `path` names — one table file, a directory of them, or a glob — checked before
    any training: one format, none empty, every one with the columns; each with its size and
    checksum (a local file's sha256, an S3 object's ETag from its listing)."""
    files, suffix, listed = listed_shards(path)
    wanted = [text_column, label_column, *([id_column] if id_column else [])]
    shard_columns(files, suffix, encoding, listed, wanted)
    checksums = tuple(known_checksum(listed[f]) or checksum(f) for f in files)
    return Shards(tuple(files), suffix, text_column, label_column, encoding, checksums, id_column)


def known_checksum(entry: Listed) -> tuple[int, str] | None:
    """(size, checksum) as the listing gave them (an S3 object's ETag); None where the bytes must be read."""
    return None if entry.etag is None else (entry.size, entry.etag)


def listed_shards(path: str) -> tuple[list[str], str, dict[str, Listed]]:
    """The table files `path` names (one file, a directory of them, a glob, an S3 prefix: the
    storage's `listing`), their one suffix, and the listing of each (size; on S3, its ETag);
    DataError when there are none or several formats."""
    listed = {entry.uri: entry for entry in listing(path, TEXT_FORMATS)}
    files = list(listed)
    if not files:
        raise DataError(f"{path}: no {', '.join(TEXT_FORMATS)} shards there")
    suffixes = sorted({Path(f).suffix.lower() for f in files})
    if len(suffixes) > 1 or suffixes[0] not in TEXT_FORMATS:
        raise DataError(f"{path}: shards must be one format of {', '.join(TEXT_FORMATS)}, found {', '.join(suffixes)}")
    return files, suffixes[0], listed


def shard_columns(
    files: Sequence[str], suffix: str, encoding: str, listed: dict[str, Listed], wanted: Sequence[str]
) -> list[str]:
    """The shards' column names, checked: none empty, every one with the columns `wanted`, all alike;
    DataError naming the first shard that is not."""
    first: list[str] | None = None
    for file in files:
        names = _columns(file, suffix, encoding, listed[file].size)
        missing = [c for c in wanted if c not in names]
        if missing:
            raise DataError(f"{file}: no column {missing[0]!r}; the columns are {', '.join(map(repr, names))}")
        if first is not None and names != first:
            raise DataError(f"{file}: its columns {names} differ from {files[0]}'s {first}")
        first = names
    return first or []


def _columns(file: str, suffix: str, encoding: str, size: int) -> list[str]:
    """A shard's column names, by its format's reader (from its schema, header or first records);
    DataError if it is empty."""
    import pyarrow as pa  # type: ignore[import-untyped]

    if size == 0:
        raise DataError(f"{file}: empty shard")
    reader = table_format(suffix)
    try:
        names, has_rows = reader.columns(partial(open_input, file), suffix, encoding)
    except (pa.ArrowException, UnicodeDecodeError) as e:
        raise DataError(f"{file}: cannot read ({first_line(e)})") from None
    if not has_rows:
        raise DataError(f"{file}: empty shard ({reader.NO_ROWS})")
    return names


def split_fingerprint(
    files: list[str] | tuple[str, ...],
    root: str,
    fractions: tuple[float, float],
    known: dict[str, tuple[int, str]] | None = None,
    selection: str = "",
) -> str:
    """sha256 over the split rule (SPLIT_RULE), the fractions, the selection (subset, limits, id
    column) and the files: each one's name (relative to `root`), size and checksum — its content's
    sha256, or what `known` gives (size, checksum) where a caller has it already (the bytes read for
    another check, an S3 listing's ETag); 16 hex digits."""
    digest = hashlib.sha256(f"{SPLIT_RULE} {fractions!r} {selection}".encode())
    for file in files:
        size, digest_of = (known or {}).get(file) or checksum(file)
        name = file.removeprefix(root).lstrip("/")
        digest.update(f"{name}\0{size}\0{digest_of}\n".encode())
    return digest.hexdigest()[:16]


class TableSplit(StreamedSplit):
    """One split of a text table's shards, streamed (module docstring)."""

    modality = "text"

    def __init__(
        self,
        shards: Shards,
        split: int,
        fractions: tuple[float, float],
        classes: tuple[str, ...],
        named: bool,
        labels: torch.Tensor,
        ids: torch.Tensor,
        selection: Selection = ALL,
    ) -> None:
        self.shards, self.split, self.fractions = shards, split, fractions
        self.classes, self.named, self.labels, self.ids = classes, named, labels, ids
        self.reading = TableReading(shards, split, fractions, classes, named, selection)  # what its reading tasks get
        # the first pass's rows: of each seed's epochs (packed replicas read one split in several
        # seeded orders at once), and of `chunks`
        self.kept: dict[tuple[str, int | None], TokenCache] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "kept": {}}  # a process's kept tokens stay in it

    def _rows(self, batch_size: int, inputs: InputSpec, seed: int | None) -> Iterator[dict[str, np.ndarray]]:
        """The split's rows: in the scan's order (`seed` None: one shard after the other), or an
        epoch's, seeded — the shards in a seeded order, read INTERLEAVED at a time by one task that
        mixes their record batches (`interleaved_rows`), handed over CHUNK_ROWS at a time and
        shuffled through a buffer of SHUFFLE_ROWS rows (or SHUFFLE_BUFFER batches, if more) here
        (`shuffled_batches`): Ray Data's own local shuffle buffer costs its per-batch overhead at
        every training batch, about half the first epoch's samples/s (docs/benchmarks/index.md)."""
        files, reading = self.shards.files, self.reading
        if seed is None:
            encoded = files_dataset(files, None, shard_rows, 1, reading=reading, inputs=inputs)
            yield from encoded.iter_batches(batch_size=batch_size, batch_format="numpy")
            return
        group = min(len(files), INTERLEAVED)
        encoded = files_dataset(files, seed, interleaved_rows, group, reading=reading, inputs=inputs, mix_seed=seed)
        chunks = encoded.iter_batches(batch_size=max(CHUNK_ROWS, batch_size), batch_format="numpy")
        buffer = max(SHUFFLE_BUFFER * batch_size, SHUFFLE_ROWS)
        yield from shuffled_batches(chunks, batch_size, buffer, np.random.default_rng(seed))

    @staticmethod
    def _batch(rows: dict[str, np.ndarray], digest: str) -> Batch:
        values, lengths, texts = tensor(rows["values"]), tensor(rows["length"]), tuple(rows["text"])
        return Batch(tensor(rows["id"]), None, values, lengths, tensor(rows["label"]), texts, digest)

    def epoch(self, batch_size: int, seed: int, epoch: int, inputs: InputSpec | None = None) -> Iterator[Batch]:
        """The epoch's batches: the first epoch read from the shards and kept, the later ones from
        what was kept (token_cache.py: the order, and what a resumed run reads)."""
        return self._kept("epochs", batch_size, self._reading(inputs), seed, epoch)

    def chunks(self, batch_size: int, inputs: InputSpec | None = None) -> Iterator[Batch]:
        """Every sample once in the scan's order: read from the shards the first time (each epoch's
        validation reads them again), from what was kept after."""
        return self._kept("chunks", batch_size, self._reading(inputs), None, 0)

    def _kept(self, slot: str, batch_size: int, inputs: InputSpec, seed: int | None, epoch: int) -> Iterator[Batch]:
        """Batches of an epoch (`seed` given) or of the fixed order (None), through the rows that
        `slot` keeps: the first pass (the first epoch's order) is read from the shards and kept."""
        digest = tokens_digest(inputs)
        key, first = (seed, digest, batch_size), None if seed is None else seed * 100_003
        order = None if first is None else first + epoch  # the stream's order of this pass
        wanted = None if epoch == 0 else order  # None: the first pass's order
        slot_key = (slot, seed)
        kept = self.kept.get(slot_key)
        if kept is not None and kept.key == key and kept.dropped:
            yield from (self._batch(rows, digest) for rows in self._rows(batch_size, inputs, order))
            return
        if kept is None or kept.key != key or not kept.complete:
            if kept is not None:
                kept.close()
            self.kept[slot_key] = kept = TokenCache(key)
            for rows in self._rows(batch_size, inputs, first):
                kept.add(rows)
                if wanted is None:
                    yield self._batch(rows, digest)
            if not kept.finish() and wanted is not None:
                yield from (self._batch(rows, digest) for rows in self._rows(batch_size, inputs, wanted))
            if wanted is None or not kept.complete:
                return
        yield from (self._batch(rows, digest) for rows in kept.batches(batch_size, wanted))

    @staticmethod
    def _reading(inputs: InputSpec | None) -> InputSpec:
        if inputs is None or inputs.tokenizer is None:
            raise ValueError("a streamed text split is read through a text model's tokenizer: give its InputSpec")
        return inputs

    def tokenizer_texts(self, limit: int) -> list[str]:
        """`limit` texts of this split drawn across all its shards, whatever order they are sorted
        in (what a tokenizer trains on): the samples whose rank(id, TOKENIZER_SEED) are the
        `limit` lowest, read here shard by shard (no Ray); every text when the split holds fewer."""
        ranks = np.sort(rank(self.ids.numpy(), TOKENIZER_SEED))
        highest = ranks[min(limit, len(ranks)) - 1] if len(ranks) else np.uint64(0)
        out: list[str] = []
        for file in self.shards.files:
            for table in shard_batches(self.shards, file):
                texts, _, keep, ids = rows_of(table, self.reading)
                keep &= rank(ids, TOKENIZER_SEED) <= highest
                out += [t for t, k in zip(texts, keep) if k]
        return out[:limit]


def open_table_stream(
    path: str,
    text_column: str = "text",
    label_column: str = "label",
    encoding: str = "utf-8",
    num_classes: int | None = None,
    val_fraction: float = 0.1,
    eval_fraction: float = 0.2,
    id_column: str | None = None,
    subset: str = "all",
    train_limit: int | None = None,
    eval_limit: int | None = None,
) -> StreamedSplits:
    """A text table's shards as three streamed splits, from one scan of them in this process, shard
    by shard (pyarrow; no Ray needed, so `congruent check` runs it too): each row's id and split
    (workers/data/keys.py, as in memory), its label, and the selection of `subset` and the limits
    (workers/data/selection.py) — 16 bytes a sample kept (id and label).
    Labels follow `read_text_table`'s rule: integers (in CSV/TSV: all digit strings) are class ids
    0..C−1 (or below `num_classes`); otherwise names, sorted."""
    shards = table_shards(path, text_column, label_column, encoding, id_column)
    fractions = (val_fraction, eval_fraction)
    scan = scan_labels(shards, fractions)
    classes, remap, integer = label_classes(path, scan, shards.suffix, num_classes)
    ids_of = [np.concatenate(parts) for parts in scan.ids]
    if id_column is not None:
        check_unique_ids(path, id_column, np.concatenate(ids_of))
    limits = {TRAIN: train_limit, EVAL: eval_limit}
    splits = []
    for code, name in ((TRAIN, "train"), (VAL, "val"), (EVAL, "eval")):
        labels, ids = remap[np.concatenate(scan.numbers[code])], ids_of[code]
        selection = split_selection(code, subset, len(classes), limits.get(code), ids, labels, path)
        keep = selection.mask(ids, labels)
        if not keep.any():
            raise DataError(f"{path}: no samples fall in the {name} split; too few distinct texts")
        kept_labels, kept_ids = torch.from_numpy(labels[keep]), torch.from_numpy(ids[keep])
        splits.append(TableSplit(shards, code, fractions, classes, not integer, kept_labels, kept_ids, selection))
    root = common_folder(shards.files)
    chosen = f"id {id_column} eval_limit {eval_limit}"  # what the eval split depends on
    fingerprint = split_fingerprint(shards.files, root, fractions, dict(zip(shards.files, shards.checksums)), chosen)
    return StreamedSplits(splits[0], splits[1], splits[2], fingerprint, path)


@dataclass(frozen=True)
class LabelScan:
    """One scan of a table's shards (`scan_labels`): each distinct label (as text) numbered in order of
    appearance, each split's rows' label numbers and ids (TRAIN, VAL, EVAL; a list of chunks each),
    and whether a batch's label column held integers (one entry per kind seen)."""

    names: dict[str, int] = field(default_factory=dict)
    numbers: list[list[np.ndarray]] = field(default_factory=lambda: [[np.zeros(0, np.int32)] for _ in range(3)])
    ids: list[list[np.ndarray]] = field(default_factory=lambda: [[np.zeros(0, np.int64)] for _ in range(3)])
    kinds: set[bool] = field(default_factory=set)


def scan_labels(shards: Shards, fractions: tuple[float, float]) -> LabelScan:
    """Every shard's rows read once, batch by batch: each row checked (`scan_rows`), its id, split and
    label number kept; DataError naming a shard that cannot be read."""
    import pyarrow as pa

    scan = LabelScan()
    for file in shards.files:
        try:
            for batch in shard_batches(shards, file):
                _, labels, integer = scan_rows(batch, shards, file)
                ids = row_ids(batch, shards)
                codes = split_codes(ids, *fractions)
                numbers = np.array([scan.names.setdefault(label, len(scan.names)) for label in labels], dtype=np.int32)
                scan.kinds.add(integer)
                for code in (TRAIN, VAL, EVAL):
                    scan.numbers[code].append(numbers[codes == code])
                    scan.ids[code].append(ids[codes == code])
        except (pa.ArrowException, OSError, UnicodeDecodeError) as e:
            raise DataError(f"{file}: cannot read ({first_line(e)})") from None
    return scan


def label_classes(
    path: str, scan: LabelScan, suffix: str, num_classes: int | None
) -> tuple[tuple[str, ...], np.ndarray, bool]:
    """The class names, the class id of each scanned label's number, and whether the labels are
    integer class ids, by `read_text_table`'s rule (`open_table_stream`); DataError when the labels
    mix kinds, are one class, or disagree with `num_classes`."""
    from workers.data.text_tables import integer_classes

    if len(scan.kinds) > 1:
        raise DataError(f"{path}: labels mix integers and strings across shards; use one kind")
    distinct = list(scan.names)
    if len(distinct) < 2:
        raise DataError(f"{path}: every row has the label {distinct[0]!r}; a classifier needs at least two classes")
    digits_are_ids = not table_format(suffix).TYPED
    if scan.kinds == {True} or (digits_are_ids and all(n.lstrip("-").isdigit() for n in distinct)):
        classes = integer_classes(path, [int(n) for n in distinct], num_classes)
        return classes, np.array([int(n) for n in distinct], dtype=np.int64), True
    if num_classes is not None and num_classes != len(distinct):
        raise DataError(f"{path}: {len(distinct)} distinct labels, but data.num_classes = {num_classes}")
    classes = tuple(sorted(distinct))
    return classes, np.array([classes.index(n) for n in distinct], dtype=np.int64), False


def check_unique_ids(path: str, id_column: str, ids: np.ndarray) -> None:
    """DataError when two rows share an id of `id_column` (an id names one sample)."""
    ordered = np.sort(ids)
    twice = np.nonzero(ordered[1:] == ordered[:-1])[0]
    if len(twice):
        raise DataError(
            f"{path}: {len(twice)} value(s) of the id column {id_column!r} name more than one row; "
            "an id names one sample"
        )


def common_folder(files: Sequence[str]) -> str:
    """The deepest folder (or S3 prefix ending at a `/`) that holds every file."""
    scheme = files[0][: files[0].find("://") + 3] if "://" in files[0] else ""  # commonpath would drop a `//`
    folders = [os.path.dirname(f.removeprefix(scheme)) for f in files]
    return scheme + os.path.commonpath(folders)
