"""Reading image datasets from disk into memory: IDX directories, ImageFolder trees, .npz files.

Everything lands in an :class:`ImageSet`: uint8 images N×C×H×W and int64 labels, kept in memory
(Fashion-MNIST is 55 MB as uint8), so that batching, augmentation and teacher inference all see the
same tensors without DataLoader worker processes on a 2-core machine.
"""

from __future__ import annotations

import gzip
import os
import struct
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch

from workers.data.encoded import EncodedSplit, encoded_images
from workers.data.held import HeldSplit
from workers.data.input_spec import InputSpec
from workers.data.keys import key_ids
from workers.errors import DataError, first_line
from workers.pixels import pixels

FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")  # Debian: dataset-fashion-mnist
FASHION_MNIST_CLASSES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
_IDX_DTYPES: dict[int, np.dtype] = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}


@dataclass(frozen=True)
class ImageSet(HeldSplit):
    """Images as uint8 N×C×H×W, labels as int64 N, the class names, and each sample's id (int64 N,
    workers/data/keys.py; default: the ids of the keys "0" … "N−1", its positions): a held split
    (workers/data/split.py)."""

    images: torch.Tensor
    labels: torch.Tensor
    classes: tuple[str, ...] = field(default=())
    ids: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.int64), compare=False)
    modality: ClassVar[str] = "image"

    def __post_init__(self) -> None:
        if self.images.dtype != torch.uint8 or self.images.ndim != 4:
            raise DataError(f"images must be uint8 N×C×H×W, got {self.images.dtype} {tuple(self.images.shape)}")
        if self.labels.ndim != 1 or len(self.labels) != len(self.images):
            raise DataError(f"{len(self.labels)} labels for {len(self.images)} images")
        if len(self.ids) == 0 and len(self.labels):
            object.__setattr__(self, "ids", positional_ids(len(self.labels)))
        if len(self.ids) != len(self.labels):
            raise DataError(f"{len(self.ids)} ids for {len(self.labels)} images")

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    @property
    def in_channels(self) -> int:
        return int(self.images.shape[1])

    @property
    def image_size(self) -> int:
        return int(self.images.shape[2])

    @property
    def sample_shape(self) -> tuple[int, ...]:
        return tuple(self.images.shape[1:])

    def take(self, index: torch.Tensor | np.ndarray | slice) -> ImageSet:
        """The samples at `index`, same class list."""
        if isinstance(index, np.ndarray):
            index = torch.from_numpy(index)
        return ImageSet(self.images[index], self.labels[index], self.classes, self.ids[index])

    def encoded(self, inputs: InputSpec | None = None) -> EncodedSplit:
        return encoded_images(self.images, inputs)

    def shareable(self) -> np.ndarray:
        """The uint8 images as one array: shared memory on a node once in the object store."""
        return self.images.numpy()

    def statistics_images(self, limit: int) -> Iterator[torch.Tensor]:
        """Every image, 1,024 at a time: a held split's statistics are taken over all of it (`limit`
        is a stream's)."""
        yield from self.images.split(1024)


def positional_ids(n: int, prefix: str = "") -> torch.Tensor:
    """int64 ids of the keys `prefix` + "0" … "n−1": the samples of a file of tensors (IDX, .npz),
    named by their row, so rows appended to the file keep the ids (and splits) of the rows before."""
    return torch.from_numpy(key_ids([f"{prefix}{i}" for i in range(n)]))


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Parse one IDX file (optionally gzipped): magic 0x0000 dtype ndim, big-endian dims, data."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError) as e:
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


def _find_idx(directory: Path, prefix: str, kind: str) -> Path | None:
    for suffix in ("", ".gz"):
        for sep in ("-", "."):
            candidate = directory / f"{prefix}-{kind}{sep}ubyte{suffix}"
            if candidate.exists():
                return candidate
    return None


def class_names(labelled: list[tuple[Path, np.ndarray]], num_classes: int | None = None) -> tuple[str, ...]:
    """Names "0" … "C−1" for the integer labels of `labelled` ((file, labels) pairs of one dataset).

    C is the declared `num_classes` (every label must lie below it); else the largest id + 1, and
    then every id below it must occur: a gap means ids that are not class indices (a 200 among
    0–9 would train a 201-class model) or a mislabelled sample. DataError names the file."""
    present = [(path, labels) for path, labels in labelled if labels.size]
    if not present:
        return tuple(str(c) for c in range(num_classes or 0))
    ids = np.unique(np.concatenate([labels for _, labels in present]))
    lowest, top = int(ids[0]), int(ids[-1])
    if lowest < 0:
        holder = next(path for path, labels in present if int(labels.min()) == lowest)
        raise DataError(f"{holder}: negative class id {lowest}")
    holder = next(path for path, labels in present if int(labels.max()) == top)
    if num_classes is not None:
        if top >= num_classes:
            raise DataError(f"{holder}: label {top} is not below data.num_classes = {num_classes}")
        return tuple(str(c) for c in range(num_classes))
    missing = np.setdiff1d(np.arange(top + 1), ids)
    if missing.size:
        shown = ", ".join(str(int(c)) for c in missing[:5]) + (", …" if missing.size > 5 else "")
        raise DataError(
            f"{holder}: class ids must run 0..C−1 without gaps, but the labels reach {top} and "
            f"{missing.size} ids below it never occur ({shown}); fix the labels, or declare the "
            "class count with data.num_classes"
        )
    return tuple(str(c) for c in range(top + 1))


def _idx_pair(directory: Path, prefix: str) -> tuple[Path, np.ndarray, np.ndarray] | None:
    """(labels file, images N×C×H×W, labels) of the `prefix` files, None when there are none."""
    images_path = _find_idx(directory, prefix, "images-idx3")
    labels_path = _find_idx(directory, prefix, "labels-idx1")
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


def fit_to_size(images: torch.Tensor, size: int) -> torch.Tensor:
    """uint8 N×C×H×W → N×C×size×size: the shorter side resized to `size` (bilinear, antialiased),
    then the centre crop (torchvision's Resize + CenterCrop, the usual evaluation view)."""
    from torchvision.transforms.v2 import functional as tvf

    if images.shape[-2:] == (size, size):
        return images
    chunks = [tvf.center_crop(tvf.resize(chunk, [size], antialias=True), [size, size]) for chunk in images.split(4096)]
    return torch.cat(chunks).contiguous()


def load_image_folder(directory: Path, num_classes: int | None = None, image_size: int | None = None) -> ImageSet:
    """An ImageFolder tree (one sub-directory per class), read with torchvision, kept as uint8;
    `num_classes`, when declared, must be the number of class folders. RGB stays RGB; RGBA and
    palette images are composited over black (`pixels`); in a tree with any colour image, grey ones
    become RGB. With `image_size` every image is resized and centre-cropped to it (`fit_to_size`),
    so the images may differ in size; without it they must not."""
    from PIL import Image, UnidentifiedImageError
    from torchvision.datasets import ImageFolder

    try:
        folder = ImageFolder(str(directory))
    except (FileNotFoundError, RuntimeError) as e:
        raise DataError(f"{directory}: not a usable ImageFolder tree ({e})") from None
    if num_classes is not None and num_classes != len(folder.classes):
        raise DataError(f"{directory}: {len(folder.classes)} class folders, but data.num_classes = {num_classes}")
    images: list[np.ndarray | None] = []  # C×H×W each, at its final size: no decoded original stays
    for path, _ in folder.samples:
        try:
            with Image.open(path) as img:
                array = pixels(img)
        except UnidentifiedImageError:
            raise DataError(f"{path}: cannot read image (not a format PIL can identify)") from None
        except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:  # truncated, corrupt data
            raise DataError(f"{path}: cannot read image ({first_line(e)})") from None
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


def fashion_mnist_dir() -> Path:
    """Where the Debian package puts Fashion-MNIST; `CONGRUENT_FASHION_MNIST_DIR` overrides it."""
    return Path(os.environ.get("CONGRUENT_FASHION_MNIST_DIR", FASHION_MNIST_DIR))


def load_images(
    source: str | os.PathLike, num_classes: int | None = None, image_size: int | None = None
) -> tuple[ImageSet, ImageSet | None]:
    """Load `fashion-mnist` or a path (IDX directory, ImageFolder tree, .npz file); with
    `image_size`, every image resized and centre-cropped to image_size² (`fit_to_size`).

    Returns (pool, test): `test` is the source's own held-out set when it has one (IDX t10k files),
    else None and the splits are carved out of `pool`. Integer labels (IDX, .npz) must be the
    class ids 0..C−1 without gaps unless `num_classes` declares C (see `class_names`).
    """
    pool, test = _load_source(source, num_classes, image_size)
    if image_size is None:
        return pool, test
    # tensor sources (IDX, .npz) are resized here; an ImageFolder was resized image by image as it was read
    return _sized(pool, image_size), None if test is None else _sized(test, image_size)


def _sized(data: ImageSet, size: int) -> ImageSet:
    return ImageSet(fit_to_size(data.images, size), data.labels, data.classes, data.ids)


def _load_source(
    source: str | os.PathLike, num_classes: int | None, image_size: int | None
) -> tuple[ImageSet, ImageSet | None]:
    if str(source) == "fashion-mnist":
        directory = fashion_mnist_dir()
        if not directory.is_dir():
            raise DataError(f"{directory}: Fashion-MNIST is not installed (apt-get install -y dataset-fashion-mnist)")
        return load_idx_directory(directory, FASHION_MNIST_CLASSES)
    path = Path(source)
    if not path.exists():
        raise DataError(f"{path}: no such file or directory")
    if path.is_file():
        if path.suffix != ".npz":
            raise DataError(f"{path}: a data file must be an .npz holding x and y")
        return load_npz(path, num_classes), None
    if not os.access(path, os.R_OK | os.X_OK):
        raise DataError(f"{path}: directory is not readable")
    if _find_idx(path, "train", "images-idx3") is not None:
        return load_idx_directory(path, num_classes=num_classes)
    return load_image_folder(path, num_classes, image_size), None
