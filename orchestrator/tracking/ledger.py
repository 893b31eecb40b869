"""The prediction ledger of a version: class ids, top-k logits and labels of the regression-eval
split, as one .npz, so that the NFR between any two versions needs no re-inference.

A ledger is written and read LEDGER_BLOCK samples at a time: `write_ledger` takes the logits as a
(memory-mapped) N×C array and writes each array into the archive as it computes it, and
`ledger_blocks` reads the archive's arrays back in blocks, so neither holds an N×C array or a
chain's N-long arrays at once. The file is an ordinary `np.savez` archive: `np.load` reads it."""

from __future__ import annotations

import math
import zipfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO

import numpy as np

from workers.metrics import both_correct_counts, class_ids, nfr_of_counts

LEDGER_TOPK = 5
LEDGER_BLOCK = 1 << 16  # samples a ledger is written and read by


def write_ledger(
    path: Path, logits: np.ndarray, labels: np.ndarray, fingerprint: str, known_classes: list[int] | None = None
) -> Path:
    """class ids, the top-k logits (values and classes) and the labels of the eval split, and the
    classes the version was trained on (flips against it count on those), .npz; `logits` (N×C,
    memory-mapped or not) is read LEDGER_BLOCK rows at a time."""
    n, width = logits.shape
    k = min(LEDGER_TOPK, width)

    def blocks(of: Callable[[np.ndarray], np.ndarray]) -> Iterator[np.ndarray]:
        for start in range(0, n, LEDGER_BLOCK):
            yield of(np.asarray(logits[start : start + LEDGER_BLOCK], dtype=np.float32))

    def top(block: np.ndarray) -> np.ndarray:
        return np.argsort(-block, axis=1, kind="stable")[:, :k]

    known = np.arange(width) if known_classes is None else np.asarray(known_classes)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, allowZip64=True) as archive:
        _write_member(archive, "class_ids", (n,), np.int32, blocks(class_ids))
        _write_member(archive, "topk_indices", (n, k), np.int32, blocks(top))
        _write_member(
            archive, "topk_values", (n, k), np.float32, blocks(lambda b: np.take_along_axis(b, top(b), axis=1))
        )
        for name, array in (
            ("labels", np.asarray(labels).astype(np.int64)),
            ("fingerprint", np.array(fingerprint)),
            ("known_classes", known.astype(np.int64)),
        ):
            _write_member(archive, name, array.shape, array.dtype, [array])
    return path


def _write_member(
    archive: zipfile.ZipFile, name: str, shape: tuple[int, ...], dtype: np.dtype | type, parts: Iterable[np.ndarray]
) -> None:
    """`name`.npy in `archive`: the .npy header of a C-ordered `shape` array, then `parts` (blocks
    along the first axis) as they come."""
    dtype = np.dtype(dtype)
    header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape}
    written = 0
    with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
        np.lib.format.write_array_header_1_0(member, header)
        for part in parts:
            data = np.ascontiguousarray(part, dtype=dtype)
            member.write(data.tobytes())
            written += data.size
    assert written == math.prod(shape), f"{name}: {written} values written for shape {shape}"


def _read_header(member: IO[bytes]) -> tuple[tuple[int, ...], np.dtype]:
    """The shape and dtype of the .npy array `member` starts with (C order, no Python objects)."""
    major, _ = np.lib.format.read_magic(member)
    read = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
    shape, fortran_order, dtype = read(member)
    if fortran_order or dtype.hasobject:
        raise ValueError("a ledger array must be C-ordered numbers")
    return shape, dtype


def ledger_blocks(path: str | Path, names: Sequence[str], block: int = LEDGER_BLOCK) -> Iterator[dict[str, np.ndarray]]:
    """The ledger's arrays `names` (each with one row per eval sample) `block` rows at a time, read
    from the archive as they are needed."""
    with zipfile.ZipFile(path) as archive:
        members = {name: archive.open(f"{name}.npy") for name in names}
        try:
            headers = {name: _read_header(member) for name, member in members.items()}
            lengths = {shape[0] if shape else 0 for shape, _ in headers.values()}
            if len(lengths) != 1:
                raise ValueError(f"{path}: the ledger's arrays {list(names)} differ in length")
            n = lengths.pop()
            for start in range(0, n, block):
                rows = min(block, n - start)
                out = {}
                for name, (shape, dtype) in headers.items():
                    row_bytes = math.prod(shape[1:]) * dtype.itemsize
                    data = members[name].read(rows * row_bytes)
                    if len(data) != rows * row_bytes:
                        raise ValueError(f"{path}: {name} ends before its {n} rows")
                    out[name] = np.frombuffer(data, dtype).reshape(rows, *shape[1:])
                yield out
        finally:
            for member in members.values():
                member.close()


def ledger_known_classes(path: str | Path) -> np.ndarray | None:
    """The classes the ledger's version was trained on (None in a ledger written before they were)."""
    with np.load(path, allow_pickle=False) as archive:
        return archive["known_classes"] if "known_classes" in archive.files else None


def chain_nfr_matrix(paths: Sequence[str | Path]) -> np.ndarray:
    """M[i, j] = NFR of version j relative to version i, on the classes version i knows, from the
    ledgers of one eval split (`paths`, in version order), read LEDGER_BLOCK samples at a time:
    `metrics.both_correct_counts` summed over the blocks."""
    known = [ledger_known_classes(path) for path in paths]
    counts = np.zeros((len(paths), len(paths)), dtype=np.int64)
    sizes = np.zeros(len(paths), dtype=np.int64)
    readers = [ledger_blocks(path, ("class_ids", "labels")) for path in paths]
    for blocks in zip(*readers, strict=True):
        labels = blocks[0]["labels"]
        correct = np.stack([b["class_ids"] == labels for b in blocks])
        scope = np.stack([np.ones(len(labels), bool) if k is None else np.isin(labels, k) for k in known])
        counts += both_correct_counts(correct, scope)
        sizes += scope.sum(axis=1)
    return nfr_of_counts(counts, sizes)


def known_mask(ledger: dict[str, np.ndarray]) -> np.ndarray:
    """The eval samples whose class the ledger's version was trained on (every sample in a ledger
    written before the classes were recorded)."""
    if "known_classes" not in ledger:
        return np.ones(len(ledger["labels"]), bool)
    return np.isin(ledger["labels"], ledger["known_classes"])


def read_ledger(path: str | Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as archive:
        return {key: archive[key] for key in archive.files}
