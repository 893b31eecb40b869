""".npz files: `x` (N×H×W, N×H×W×C or N×C×H×W; uint8, or floats in [0, 1]) and `y` (N ints), read
whole into an ImageSet (allow_pickle off). Never streamed: a tensor file is read whole."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import torch

from workers.data.images import ImageSet, class_names
from workers.errors import DataError


def load_npz(path: Path, num_classes: int | None = None) -> ImageSet:
    """An .npz with `x` (N×H×W, N×H×W×C or N×C×H×W; uint8, or floats in [0, 1]) and `y` (N ints)."""
    if not zipfile.is_zipfile(path):  # np.load would take any other file for a pickle
        raise DataError(f"{path}: not an .npz archive (no zip header)")
    try:
        with np.load(path, allow_pickle=False) as archive:
            if "x" not in archive or "y" not in archive:
                raise DataError(f"{path}: .npz must hold arrays 'x' and 'y', found {sorted(archive.files)}")
            x, y = archive["x"], archive["y"]
    except (OSError, ValueError) as e:
        if isinstance(e, DataError):
            raise
        raise DataError(f"{path}: cannot read .npz ({e})") from None
    if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer) or (y.size and y.min() < 0):
        raise DataError(f"{path}: 'y' must be a 1-D array of non-negative integers")
    if np.issubdtype(x.dtype, np.floating):
        if not np.isfinite(x).all() or x.min() < 0 or x.max() > 1:
            raise DataError(f"{path}: float 'x' must be finite and within [0, 1]")
        x = np.round(x * 255).astype(np.uint8)
    elif x.dtype != np.uint8:
        raise DataError(f"{path}: 'x' must be uint8 or float, got {x.dtype}")
    if x.ndim == 3:
        x = x[:, None]
    elif x.ndim == 4 and x.shape[-1] in (1, 3) and x.shape[1] not in (1, 3):
        x = x.transpose(0, 3, 1, 2)
    if x.ndim != 4 or len(x) != len(y):
        raise DataError(f"{path}: 'x' of shape {x.shape} does not match {len(y)} labels")
    classes = class_names([(path, y)], num_classes)
    return ImageSet(torch.from_numpy(np.ascontiguousarray(x)), torch.from_numpy(y.astype(np.int64)), classes)
