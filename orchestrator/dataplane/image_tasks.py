"""What Ray Data's reading tasks run on an ImageFolder's files: read each file (local or on S3) and
decode it with the format's reader (workers/data/formats/image_folder.py `decode_image`, the one the
in-memory loader shares), resized and centre-cropped only where an image is not image_size² already.
Imports numpy, PIL and the shared workers modules only — no torch (image_folder.py says why).
"""

from __future__ import annotations

import numpy as np

from workers.data.formats.image_folder import decode_image
from workers.storage import read_bytes


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
        "image": np.stack([decode_image(read_bytes(path), path, channels, size, resize) for path in paths]),
        "label": np.array([index[rel.split("/")[0]] for rel in relative], dtype=np.int64),
    }
