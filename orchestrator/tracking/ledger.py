"""The prediction ledger of a version: class ids, top-k logits and labels of the regression-eval
split, as one .npz, so that the NFR between any two versions needs no re-inference."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from workers.metrics import class_ids

LEDGER_TOPK = 5


def write_ledger(
    path: Path, logits: np.ndarray, labels: np.ndarray, fingerprint: str, known_classes: list[int] | None = None
) -> Path:
    """class ids, the top-k logits (values and classes) and the labels of the eval split, and the
    classes the version was trained on (flips against it count on those), .npz."""
    k = min(LEDGER_TOPK, logits.shape[1])
    order = np.argsort(-logits, axis=1, kind="stable")[:, :k]
    known = np.arange(logits.shape[1]) if known_classes is None else np.asarray(known_classes)
    np.savez_compressed(
        path,
        class_ids=class_ids(logits).astype(np.int32),
        topk_indices=order.astype(np.int32),
        topk_values=np.take_along_axis(logits, order, axis=1).astype(np.float32),
        labels=labels.astype(np.int64),
        fingerprint=np.array(fingerprint),
        known_classes=known.astype(np.int64),
    )
    return path


def known_mask(ledger: dict[str, np.ndarray]) -> np.ndarray:
    """The eval samples whose class the ledger's version was trained on (every sample in a ledger
    written before the classes were recorded)."""
    if "known_classes" not in ledger:
        return np.ones(len(ledger["labels"]), bool)
    return np.isin(ledger["labels"], ledger["known_classes"])


def read_ledger(path: str | Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as archive:
        return {key: archive[key] for key in archive.files}
