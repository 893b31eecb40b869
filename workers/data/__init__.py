"""Data for Congruent: real image datasets, deterministic splits, subsets, fingerprints, augmentation.

Public surface::

    from workers.data import load_splits, DataSplits, ImageSet, fingerprint, augment_batch
"""

from workers.data.augment import augment_batch, to_model_input
from workers.data.sources import DataError, ImageSet, load_images
from workers.data.splits import (
    DataSplits,
    SUBSETS,
    fingerprint,
    half_classes,
    half_samples,
    load_splits,
)

__all__ = [
    "DataError",
    "DataSplits",
    "ImageSet",
    "SUBSETS",
    "augment_batch",
    "fingerprint",
    "half_classes",
    "half_samples",
    "load_images",
    "load_splits",
    "to_model_input",
]
