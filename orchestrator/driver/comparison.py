"""`congruent compare`: saved predictions read (by position against a labels file, or joined by
sample id: prediction folders, ledgers, live sides) and compared, with flips by slice when asked.
The readers and the metrics are driver/compare.py's."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from orchestrator.driver.compare import InputError

__all__ = ["InputError", "InputsDisagree", "compared"]


class InputsDisagree(ValueError):
    """Inputs that do not go together (labels beside files that carry theirs, slices without ids)."""


def compared(
    predictions: Sequence[str], labels_path: str | None, slices_path: str | None, min_slice_n: int
) -> dict[str, Any]:
    """ER of each prediction set, flips of each consecutive pair, the NFR matrix, and `slices` (each
    pair's flips by slice) when `slices_path` names the samples' slice values. InputsDisagree when
    the inputs lack what they need (labels for .npy files, ids for slices), InputError naming a file
    that cannot be read."""
    from orchestrator.driver.compare import (
        aligned_predictions,
        by_id,
        compare_predictions,
        compare_slices,
        load_labels,
        load_prediction_file,
        slice_values,
    )

    slices = None
    if by_id(predictions):
        if labels_path:
            raise InputsDisagree("prediction files by id carry their labels: drop --labels")
        ids, labels, read = aligned_predictions(predictions)
        slices = slice_values(slices_path, ids) if slices_path else None
    elif slices_path:
        raise InputsDisagree("--slices joins by sample id: give prediction folders, ledgers or live sides")
    elif labels_path is None:
        raise InputsDisagree(".npy predictions need --labels LABELS.npy, their labels (see congruent compare --help)")
    else:
        labels = load_labels(labels_path)
        read = [load_prediction_file(path, n=len(labels), num_classes=int(labels.max()) + 1) for path in predictions]
    result = compare_predictions(labels, read)
    if slices is not None:
        result["slices"] = compare_slices(labels, read, slices, min_slice_n)
    return result
