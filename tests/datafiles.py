"""Small real dataset files written by tests: IDX directories (the MNIST format), PNG ImageFolder
trees and .npz archives, from slices of the real Fashion-MNIST images."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np

_IDX_CODES = {np.dtype(np.uint8): 0x08}


def write_idx(path: Path, array: np.ndarray) -> Path:
    """One IDX file (gzipped when the name ends in .gz): magic, big-endian dims, the uint8 data."""
    header = bytes([0, 0, _IDX_CODES[array.dtype], array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wb") as f:
        f.write(header + np.ascontiguousarray(array).tobytes())
    return path


def write_idx_dataset(folder: Path, images: np.ndarray, labels: np.ndarray) -> Path:
    """`folder` holding train-images-idx3-ubyte and train-labels-idx1-ubyte (N×28×28, N uint8)."""
    folder.mkdir(parents=True, exist_ok=True)
    write_idx(folder / "train-images-idx3-ubyte", images.astype(np.uint8))
    write_idx(folder / "train-labels-idx1-ubyte", labels.astype(np.uint8))
    return folder
