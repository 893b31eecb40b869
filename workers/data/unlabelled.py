"""Unlabelled texts (`data.unlabelled`): inputs an ELODI student distils on without a label.

LDI (ELODI Eq. 5) reads only the teachers' logits, so texts nobody labelled — the rest of a corpus,
production traffic — show the student how its ensemble behaves beyond the labelled training split,
where the replicas have fitted the labels and their logits say little more. The student trains on
the labelled split followed by these texts, labelled UNLABELLED: its CE term skips them and LDI
takes every sample (workers/training/losses.py). The replicas train on the labelled split only.

A text already in the train, val or eval split (by content, workers/data/keys.py) is left out, so
no held-out text is ever trained on, and so is every copy of a text after its first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from workers.data.keys import key_ids, text_keys
from workers.data.text import UNLABELLED, TextSet


@dataclass(frozen=True)
class UnlabelledTexts:
    """The texts kept (a TextSet labelled UNLABELLED, ids of their content) and how many rows were
    left out: copies of a kept text, or texts of the labelled splits."""

    texts: TextSet
    dropped: int


def unlabelled_texts(texts: Sequence[str], labelled: Sequence[TextSet], classes: tuple[str, ...]) -> UnlabelledTexts:
    """The first copy of each of `texts` whose content is in none of the `labelled` splits."""
    ids = key_ids(text_keys(texts))
    keep = np.zeros(len(ids), dtype=bool)
    keep[np.unique(ids, return_index=True)[1]] = True
    known = [key_ids(text_keys(split.texts)) for split in labelled]
    if known:
        keep &= ~np.isin(ids, np.concatenate(known))
    kept = np.flatnonzero(keep)
    labels = torch.full((len(kept),), UNLABELLED, dtype=torch.int64)
    data = TextSet(tuple(texts[i] for i in kept.tolist()), labels, classes, torch.from_numpy(ids[kept]))
    return UnlabelledTexts(data, len(ids) - len(kept))
