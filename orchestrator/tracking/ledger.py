"""The prediction ledger of a version: class ids, top-k logits and labels of the regression-eval
split, as one .npz, so that the NFR between any two versions needs no re-inference."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from workers.metrics import class_ids

LEDGER_TOPK = 5


def write_ledger(path: Path, logits: np.ndarray, labels: np.ndarray, fingerprint: str) -> Path:
    """class ids, the top-k logits (values and classes) and the labels of the eval split, .npz."""
    k = min(LEDGER_TOPK, logits.shape[1])
    order = np.argsort(-logits, axis=1, kind="stable")[:, :k]
    np.savez_compressed(
        path, class_ids=class_ids(logits).astype(np.int32), topk_indices=order.astype(np.int32),
        topk_values=np.take_along_axis(logits, order, axis=1).astype(np.float32),
        labels=labels.astype(np.int64), fingerprint=np.array(fingerprint),
    )
    return path


def read_ledger(path: str | Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as archive:
        return {key: archive[key] for key in archive.files}
