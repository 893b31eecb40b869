"""Data for Congruent: real image datasets, deterministic splits, subsets, fingerprints, augmentation.

Public surface::

    from workers.data import load_splits, DataSplits, ImageSet, fingerprint, augment_batch
    from workers.data import Batch, epoch_batches, batch_inputs     # a step's samples and views
"""

from workers.data.augment import AugmentDraws, apply_augmentation, augment_batch, to_model_input
from workers.data.batches import Batch, batch_inputs, epoch_batches
from workers.data.sources import DataError, ImageSet, load_images
from workers.data.splits import (
    SUBSETS,
    DataSplits,
    fingerprint,
    half_classes,
    half_samples,
    load_splits,
)

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
    "half_classes",
    "half_samples",
    "load_images",
    "load_splits",
    "to_model_input",
]
