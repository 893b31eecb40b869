"""A decoded image's pixels as uint8 arrays (imports numpy and PIL only: Ray Data's reading tasks
decode with it without loading torch)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

_GREY = ("L", "1", "I;16", "I")
_ALPHA = ("RGBA", "RGBa", "LA", "La", "PA")


def pixels(img: PILImage) -> np.ndarray:
    """A PIL image as uint8 H×W (grey) or H×W×3 (colour). Transparency is composited over black,
    the value random crops pad with: a palette image with transparency is read through RGBA, as
    PIL advises (its own RGB conversion would guess one colour per palette entry and warn)."""
    from PIL import Image

    if img.mode in _GREY:
        return np.asarray(img.convert("L"))
    if img.mode in _ALPHA or (img.mode == "P" and "transparency" in img.info):
        rgba = img.convert("RGBA")
        flat = Image.alpha_composite(Image.new("RGBA", rgba.size, (0, 0, 0, 255)), rgba)
        return np.asarray(flat.convert("L" if img.mode in ("LA", "La") else "RGB"))
    return np.asarray(img.convert("RGB"))
