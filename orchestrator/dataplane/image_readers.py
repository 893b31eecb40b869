"""What Ray Data's reading tasks run on an ImageFolder's files: decode, then resize and centre-crop
only where an image is not image_size² already. Imports numpy, PIL and the shared workers modules
only — no torch, which a task would otherwise load for nothing (about 300 MB per reading process;
docs/benchmarks.md "Data larger than its memory limit"): torch comes in only to resize, with
`fit_to_size`, so both paths give the in-memory loader's exact pixels.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from workers.errors import DataError, first_line
from workers.names import is_s3
from workers.pixels import pixels

SAMPLED = 32  # images preflight decodes to learn the tree's channels (and size, without image_size)


def decode_image(data: bytes, where: str, channels: int, size: int, resize: bool = True) -> np.ndarray:
    """uint8 C×size×size of one encoded image: `pixels` (transparency over black), grey repeated
    to 3 channels in a colour tree, resized and centre-cropped (`fit_to_size`); DataError naming
    `where` for a file PIL cannot read, a colour image in a grey tree, or (no `resize`) another size."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as img:
            array = pixels(img)
    except UnidentifiedImageError:
        raise DataError(f"{where}: cannot read image (not a format PIL can identify)") from None
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:
        raise DataError(f"{where}: cannot read image ({first_line(e)})") from None
    if array.ndim == 3 and channels == 1:
        raise DataError(f"{where}: a colour image in a tree whose first {SAMPLED} images are grey")
    chw = np.repeat(array[None], channels, 0) if array.ndim == 2 else array.transpose(2, 0, 1)
    if chw.shape[1:] == (size, size):
        return np.ascontiguousarray(chw)
    if not resize:
        raise DataError(f"{where}: {chw.shape[2]}×{chw.shape[1]}, not {size}×{size}; set data.image_size to resize")
    import torch

    from workers.data.sources import fit_to_size

    return fit_to_size(torch.from_numpy(np.ascontiguousarray(chw))[None], size)[0].numpy()


def file_bytes(path: str) -> bytes:
    """The bytes of a local file or of an S3 object (`s3://bucket/key`, the storage's credentials);
    DataError naming it when it cannot be read."""
    if not is_s3(path):
        return Path(path).read_bytes()
    from orchestrator.dataplane.objects import open_input

    try:
        with open_input(path) as f:
            return bytes(f.read())
    except OSError as e:
        raise DataError(f"{path}: cannot read ({first_line(e)})") from None


def decode_images(
    rows: dict[str, np.ndarray], root: str, classes: tuple[str, ...], channels: int, size: int, resize: bool
) -> dict[str, np.ndarray]:
    """A batch of files (local or on S3): their keys (paths relative to `root`), decoded images and
    labels (the class folder of each)."""
    paths = [str(p) for p in rows["file"]]
    relative = [p.removeprefix(root.rstrip("/") + "/") for p in paths]
    index = {name: i for i, name in enumerate(classes)}
    return {
        "key": np.array(relative, dtype=object),
        "image": np.stack([decode_image(file_bytes(path), path, channels, size, resize) for path in paths]),
        "label": np.array([index[rel.split("/")[0]] for rel in relative], dtype=np.int64),
    }
