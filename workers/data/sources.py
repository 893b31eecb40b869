"""Image sources by name or path: the built-in Fashion-MNIST (Debian's IDX files), an IDX directory,
an ImageFolder tree or an .npz file, each read by its format's reader (workers/data/formats/) into
ImageSets (workers/data/images.py)."""

from __future__ import annotations

import os
from pathlib import Path

from workers.data.formats.idx import find_idx, load_idx_directory
from workers.data.formats.image_folder import load_image_folder
from workers.data.formats.npz import load_npz
from workers.data.images import ImageSet, fit_to_size
from workers.errors import DataError

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
    if find_idx(path, "train", "images-idx3") is not None:
        return load_idx_directory(path, num_classes=num_classes)
    return load_image_folder(path, num_classes, image_size), None
