"""Writers of malformed files for the bad-input corpus (tests/bad_inputs.py): checkpoints that
are not what they claim, data folders and IDX files with defects, each a function of a path or folder."""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from workers.models.checkpoints import ModelSettings, save_checkpoint


def truncated(path: Path) -> None:
    settings = ModelSettings("mlp-small", 10)
    save_checkpoint(path, settings.build(), settings)
    path.write_bytes(path.read_bytes()[:2000])


def other_architecture(path: Path) -> None:
    torch.save(
        {
            "model": {"arch": "mlp-small", "num_classes": 10},
            "state_dict": ModelSettings("lenet", 10).build().state_dict(),
        },
        path,
    )


def five_classes(path: Path) -> None:
    save_checkpoint(path, ModelSettings("mlp-small", 5).build(), ModelSettings("mlp-small", 5))


def pickled_object(path: Path) -> None:
    class_ref = os.system  # a callable pickle would import and call on load
    torch.save({"model": {"arch": "mlp-small", "num_classes": 10}, "state_dict": {}, "payload": class_ref}, path)


def plain_pickle(path: Path) -> None:
    path.write_bytes(pickle.dumps({"model": {"arch": "mlp-small"}}))


def not_a_checkpoint_dict(path: Path) -> None:
    torch.save({"weights": torch.zeros(3)}, path)


def empty_dir(folder: Path) -> Path:
    (folder / "empty-data").mkdir(exist_ok=True)
    return folder / "empty-data"


def npz(name: str, **arrays) -> Callable[[Path], Path]:
    def write(folder: Path) -> Path:
        np.savez(folder / name, **arrays)
        return folder / name

    return write


def text_file(name: str, text: str) -> Callable[[Path], Path]:
    def write(folder: Path) -> Path:
        (folder / name).write_text(text)
        return folder / name

    return write


def idx_with_labels(labels: list[int]) -> Callable[[Path], Path]:
    """An IDX directory (train-images / train-labels) of 28×28 noise images with these labels."""

    def write(folder: Path) -> Path:
        from datafiles import write_idx_dataset

        images = np.random.default_rng(0).integers(0, 256, (len(labels), 28, 28), dtype=np.uint8)
        return write_idx_dataset(folder / "idx", images, np.array(labels))

    return write


DIGITS_WITH_STRAYS = [i % 10 for i in range(60)] + [200, 17]  # a 201-class model unless refused


def image_tree(*files: tuple[str, bytes | None]) -> Callable[[Path], Path]:
    """An ImageFolder tree of `(class/name, content)` files; content None: a valid 28×28 PNG."""

    def write(folder: Path) -> Path:
        from PIL import Image

        root = folder / "images"
        for name, content in files:
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if content is None:
                Image.fromarray(np.full((28, 28), 128, np.uint8)).save(path)
            else:
                path.write_bytes(content)
        return root

    return write


def half_a_png() -> bytes:
    """The first half of a PNG file of 28×28 noise: a download cut short."""
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (28, 28), dtype=np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()[: len(buffer.getvalue()) // 2]


def broken_link(folder: Path) -> Path:
    link = folder / "data-link"
    if not link.is_symlink():
        link.symlink_to(folder / "gone")
    return link
