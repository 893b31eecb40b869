"""A version's answers on a model's protected set (orchestrator/tracking/protected.py), from its
checkpoint alone: the evaluation task scores a new version with it, and the gate (`promote`, a
canary, `versions --protected`) hands it to the store as its `Scorer`. Light to import: torch loads
only when a set is scored."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from workers.storage import fetch_checkpoint

PROTECTED_BATCH = 256  # protected inputs answered at once


def protected_answers(
    checkpoint: str,
    inputs: Sequence[str],
    allow_user_factories: bool = False,
    images: Sequence[bytes | None] | None = None,
) -> np.ndarray:
    """A version's class id for each protected input (a local or S3 `checkpoint`, answering raw
    inputs as `serve` and the pyfunc model do: workers/models/raw_inputs.py): a text, or for an
    image model the sample's encoded file from `images` (its input is only the path it had)."""
    from workers.models.raw_inputs import RawInputModel

    model = RawInputModel(fetch_checkpoint(checkpoint), allow_user_factories=allow_user_factories)
    payloads: list[str | bytes] = list(inputs)
    if model.modality != "text":
        if images is None or any(image is None for image in images):
            raise ValueError("an image model's protected samples are scored from the files kept with the set")
        payloads = [image for image in images if image is not None]
    out: list[int] = []
    for start in range(0, len(payloads), PROTECTED_BATCH):
        out += [a.class_id for a in model.answer(payloads[start : start + PROTECTED_BATCH])]
    return np.asarray(out, dtype=np.int64)
