"""IDX files (MNIST's format, optionally gzipped): a directory with train-{images-idx3,labels-idx1}-ubyte
and optionally the t10k-… files, read whole into ImageSets. Never streamed: a tensor file is read whole
(`data.streaming: true` on one is refused in preflight)."""

from __future__ import annotations

import gzip
import hashlib
import os
import struct
import tempfile
import zlib
from pathlib import Path

import numpy as np
import torch

from workers.data.images import ImageSet, class_names, positional_ids
from workers.errors import DataError
from workers.private_cache import private_folder

_IDX_DTYPES: dict[int, np.dtype] = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Parse one IDX file (optionally gzipped): magic 0x0000 dtype ndim, big-endian dims, data."""
    path = Path(path)
    try:
        raw = _decompressed(path) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError, zlib.error) as e:
        raise DataError(f"{path}: cannot read IDX file ({e})") from None
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_DTYPES:
        raise DataError(f"{path}: not an IDX file (bad magic number)")
    ndim = raw[3]
    dims = struct.unpack(f">{ndim}I", raw[4 : 4 + 4 * ndim])
    dtype = np.dtype(_IDX_DTYPES[raw[2]])
    expected = int(np.prod(dims)) * dtype.itemsize
    body = raw[4 + 4 * ndim :]
    if len(body) != expected:
        raise DataError(f"{path}: IDX body has {len(body)} bytes, header says {expected}")
    return np.frombuffer(body, dtype=dtype).reshape(dims)


def _decompressed(path: Path) -> bytes:
    """The gunzipped bytes of `path`, kept in this user's private cache folder (private_cache.py) under
    the file's path, inode, size and modification time, so each process after the first reads them
    instead of decompressing again (Fashion-MNIST's training images: 0.25 s of every stage's start);
    a changed file has another key. Without a usable cache folder, decompressed every time."""
    info = path.stat()
    identity = f"{path.resolve()}\0{info.st_ino}\0{info.st_size}\0{info.st_mtime_ns}"
    try:
        cached = private_folder("data") / f"{hashlib.sha256(identity.encode()).hexdigest()}.idx"
    except OSError:  # PermissionError: someone else's folder, or one others may write; or no /tmp
        return gzip.decompress(path.read_bytes())
    try:
        return cached.read_bytes()
    except FileNotFoundError:
        pass
    raw = gzip.decompress(path.read_bytes())
    # written beside, then renamed: another process never reads half of it
    descriptor, writing = tempfile.mkstemp(dir=cached.parent, prefix=".writing-")
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(raw)
        os.replace(writing, cached)
    except OSError:  # a full disk costs the cache, not the read
        Path(writing).unlink(missing_ok=True)
    return raw


def find_idx(directory: Path, prefix: str, kind: str) -> Path | None:
    for suffix in ("", ".gz"):
        for sep in ("-", "."):
            candidate = directory / f"{prefix}-{kind}{sep}ubyte{suffix}"
            if candidate.exists():
                return candidate
    return None


def _idx_pair(directory: Path, prefix: str) -> tuple[Path, np.ndarray, np.ndarray] | None:
    """(labels file, images N×C×H×W, labels) of the `prefix` files, None when there are none."""
    images_path = find_idx(directory, prefix, "images-idx3")
    labels_path = find_idx(directory, prefix, "labels-idx1")
    if images_path is None or labels_path is None:
        return None
    images = read_idx(images_path)
    labels = read_idx(labels_path).astype(np.int64)
    if images.ndim == 3:
        images = images[:, None]
    if images.dtype != np.uint8:
        raise DataError(f"{images_path}: expected uint8 pixels, got {images.dtype}")
    return labels_path, images, labels


def load_idx_directory(
    directory: Path, classes: tuple[str, ...] | None = None, num_classes: int | None = None
) -> tuple[ImageSet, ImageSet | None]:
    """A directory with train-{images-idx3,labels-idx1}-ubyte[.gz] and optionally t10k-… files.

    Returns (train, test); test is None when there are no t10k files. Without `classes` (names),
    the class ids of both files are checked by `class_names`.
    """
    pairs = [_idx_pair(directory, "train"), _idx_pair(directory, "t10k")]
    if pairs[0] is None:
        raise DataError(f"{directory}: no train-images-idx3-ubyte / train-labels-idx1-ubyte files")
    found = [pair for pair in pairs if pair is not None]
    if classes is None:
        classes = class_names([(path, labels) for path, _, labels in found], num_classes)
    train, test = (
        None
        if pair is None
        else ImageSet(
            torch.from_numpy(pair[1].copy()),
            torch.from_numpy(pair[2]),
            classes,
            positional_ids(len(pair[2]), f"{prefix}/"),
        )
        for pair, prefix in zip(pairs, ("train", "t10k"))
    )
    assert train is not None  # pairs[0] was checked above
    return train, test
