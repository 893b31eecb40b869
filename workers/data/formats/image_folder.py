"""ImageFolder trees (one sub-directory per class, class names sorted), local or on S3: how an image
file becomes pixels (`read_pixels`: PIL, transparency composited over black), read whole into an
ImageSet (`load_image_folder`, the in-memory path) or one encoded file at a time (`decode_image`,
what Ray Data's reading tasks run: orchestrator/dataplane/image_tasks.py). Both give the same pixels.

Imports numpy, PIL and the shared workers modules only — no torch, which a reading task would
otherwise load for nothing (about 300 MB per reading process; docs/benchmarks/streaming.md "Data larger than
its memory limit"): torch comes in only to resize, with `fit_to_size`, and to read a tree whole.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from workers.data.keys import key_ids
from workers.errors import DataError, first_line
from workers.pixels import pixels

if TYPE_CHECKING:
    from workers.data.images import ImageSet

SAMPLED = 32  # images preflight decodes to learn a streamed tree's channels (and size, without image_size)


def read_pixels(source: Any, where: object) -> np.ndarray:
    """uint8 H×W (grey) or H×W×3 of one image file (a path or a file object): `pixels`, transparency
    over black; DataError naming `where` for a file PIL cannot read."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(source) as img:
            return pixels(img)
    except UnidentifiedImageError:
        raise DataError(f"{where}: cannot read image (not a format PIL can identify)") from None
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:  # truncated, corrupt data
        raise DataError(f"{where}: cannot read image ({first_line(e)})") from None


def decode_image(data: bytes, where: str, channels: int, size: int, resize: bool = True) -> np.ndarray:
    """uint8 C×size×size of one encoded image (`read_pixels`), grey repeated to 3 channels in a colour
    tree, resized and centre-cropped (`fit_to_size`); DataError naming `where` for a file PIL cannot
    read, a colour image in a grey tree, or (no `resize`) another size."""
    array = read_pixels(io.BytesIO(data), where)
    if array.ndim == 3 and channels == 1:
        raise DataError(f"{where}: a colour image in a tree whose first {SAMPLED} images are grey")
    chw = np.repeat(array[None], channels, 0) if array.ndim == 2 else array.transpose(2, 0, 1)
    if chw.shape[1:] == (size, size):
        return np.ascontiguousarray(chw)
    if not resize:
        raise DataError(f"{where}: {chw.shape[2]}×{chw.shape[1]}, not {size}×{size}; set data.image_size to resize")
    import torch

    from workers.data.images import fit_to_size

    return fit_to_size(torch.from_numpy(np.ascontiguousarray(chw))[None], size)[0].numpy()


def image_problem(data: bytes) -> str | None:
    """Why the bytes of an image file cannot be a readable image, without decoding its pixels: PIL
    cannot identify them, their structure fails PIL's `verify` (a PNG's chunk checksums, a file cut
    short), or a JPEG's last scan (SOS marker) has no end-of-image marker after it (cut short; bytes
    after the marker do not matter). None when none of these: a file may still fail to decode."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as img:
            kind = img.format
            img.verify()
    except UnidentifiedImageError:
        return "not a format PIL can identify"
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:
        return first_line(e)
    if kind == "JPEG" and data.rfind(b"\xff\xd9") < data.rfind(b"\xff\xda"):
        return "a JPEG cut short: no end-of-image marker after its last scan"
    return None


def is_colour(data: bytes, where: str) -> bool:
    """Whether an encoded image has colour (3 channels once `pixels` read it); DataError naming `where`."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as img:
            return pixels(img).ndim == 3
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:  # unidentified: OSError
        raise DataError(f"{where}: cannot read image ({first_line(e)})") from None


def square_side(data: bytes, where: str) -> int:
    """The side of a square encoded image (a tree without image_size must hold S×S images of one S)."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as img:
        width, height = img.size
    if width != height:
        raise DataError(f"{where}: {width}×{height} is not square; set data.image_size to resize and crop")
    return int(width)


def load_image_folder(directory: Path, num_classes: int | None = None, image_size: int | None = None) -> ImageSet:
    """An ImageFolder tree (one sub-directory per class), read with torchvision, kept as uint8;
    `num_classes`, when declared, must be the number of class folders. RGB stays RGB; RGBA and
    palette images are composited over black (`pixels`); in a tree with any colour image, grey ones
    become RGB. With `image_size` every image is resized and centre-cropped to it (`fit_to_size`),
    so the images may differ in size; without it they must not."""
    import torch
    from torchvision.datasets import ImageFolder

    from workers.data.images import ImageSet, fit_to_size

    try:
        folder = ImageFolder(str(directory))
    except (FileNotFoundError, RuntimeError) as e:
        raise DataError(f"{directory}: not a usable ImageFolder tree ({e})") from None
    if num_classes is not None and num_classes != len(folder.classes):
        raise DataError(f"{directory}: {len(folder.classes)} class folders, but data.num_classes = {num_classes}")
    images: list[np.ndarray | None] = []  # C×H×W each, at its final size: no decoded original stays
    for path, _ in folder.samples:
        array = read_pixels(path, path)
        chw = np.ascontiguousarray(array[None] if array.ndim == 2 else array.transpose(2, 0, 1))
        if image_size is not None:  # a grey image resized before it becomes RGB: the same pixels
            chw = fit_to_size(torch.from_numpy(chw)[None], image_size)[0].numpy()
        images.append(chw)
    shapes = {a.shape[1:] for a in images if a is not None}
    if len(shapes) != 1:
        raise DataError(
            f"{directory}: images differ in size ({sorted(shapes)[:3]}…); set data.image_size to resize them"
        )
    channels = 3 if any(a is not None and len(a) == 3 for a in images) else 1
    stacked = np.empty((len(images), channels, *shapes.pop()), dtype=np.uint8)
    for i, image in enumerate(images):  # each copied in (grey broadcast to RGB in a colour tree), then let go
        stacked[i] = image
        images[i] = None
    labels = np.array([target for _, target in folder.samples], dtype=np.int64)
    keys = [os.path.relpath(path, directory).replace(os.sep, "/") for path, _ in folder.samples]
    ids = torch.from_numpy(key_ids(keys))  # a streamed tree's keys (orchestrator/dataplane/image_streams.py)
    return ImageSet(torch.from_numpy(stacked), torch.from_numpy(labels), tuple(folder.classes), ids)
