"""Data for Congruent: real image datasets, deterministic splits, subsets, fingerprints, augmentation.

Public surface::

    from workers.data import load_splits, DataSplits, ImageSet, fingerprint, augment_batch
    from workers.data import Batch, epoch_batches, batch_inputs     # a step's samples and views

The names load on first use (PEP 562): a module of this package that needs no torch (keys.py,
tokenizer.py, input_spec.py: what Ray Data's reading tasks run) can be imported without it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workers.data.augment import AugmentDraws, apply_augmentation, augment_batch, to_model_input
    from workers.data.batches import Batch, batch_inputs, epoch_batches
    from workers.data.dataset_splits import SUBSETS, DataSplits, fingerprint, load_splits
    from workers.data.images import ImageSet
    from workers.data.sources import load_images
    from workers.errors import DataError

_HOMES = {
    "workers.data.augment": ("AugmentDraws", "apply_augmentation", "augment_batch", "to_model_input"),
    "workers.data.batches": ("Batch", "batch_inputs", "epoch_batches"),
    "workers.data.images": ("ImageSet",),
    "workers.data.sources": ("load_images",),
    "workers.errors": ("DataError",),
    "workers.data.dataset_splits": ("SUBSETS", "DataSplits", "fingerprint", "load_splits"),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}

__all__ = [
    "AugmentDraws",
    "Batch",
    "DataError",
    "DataSplits",
    "ImageSet",
    "SUBSETS",
    "apply_augmentation",
    "augment_batch",
    "batch_inputs",
    "epoch_batches",
    "fingerprint",
    "load_images",
    "load_splits",
    "to_model_input",
]


def __getattr__(name: str) -> Any:
    if name not in _HOME_OF:
        raise AttributeError(f"module 'workers.data' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOME_OF[name]), name)
    globals()[name] = value
    return value
