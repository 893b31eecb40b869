"""Which samples each training step sees, and how they are augmented: an epoch's plan of batches,
drawn on the CPU from a generator seeded by (seed, epoch), so a resumed run and a run on another
device see the same batches.

A `Batch` is small — sample indices and per-sample augmentation draws, ~7 bytes a sample — and is
what travels to a teacher actor that holds the training split: it rebuilds the same augmented
inputs with `batch_inputs`, instead of receiving them (~3 KB a sample for 28×28 float images).

A batch of a streamed split (workers/data/streamed.py) carries its samples themselves (`values`,
`lengths`, `labels`), and its `indices` are the samples' stable ids (workers/data/keys.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from workers.data.augment import AugmentDraws, apply_augmentation, to_model_input


@dataclass(frozen=True)
class Batch:
    """One step's samples (`indices` into the training split, int32) and their augmentation; from a
    streamed split, the samples' ids (int64) and the samples: uint8 images B×C×H×W or int32 token
    ids B×L (`values`, with `lengths` for text) and their `labels`."""

    indices: torch.Tensor
    draws: AugmentDraws | None = None
    values: torch.Tensor | None = None
    lengths: torch.Tensor | None = None
    labels: torch.Tensor | None = None
    texts: tuple[str, ...] | None = None  # streamed text: the texts, for a model with another tokenizer
    tokens_of: str | None = None  # streamed text: the digest of the tokenizer `values` come from

    def __len__(self) -> int:
        return len(self.indices)

    def shard(self, rank: int, world: int) -> Batch:
        """This process's part of the batch in data-parallel training: positions rank, rank + world, …"""
        window = slice(rank, None, world)

        def part(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t[window]

        draws = None if self.draws is None else self.draws.take(window)
        texts = None if self.texts is None else self.texts[window]
        values, lengths, labels = part(self.values), part(self.lengths), part(self.labels)
        return Batch(self.indices[window], draws, values, lengths, labels, texts, self.tokens_of)

    def nbytes(self) -> int:
        """Bytes this request carries (indices and draws)."""
        parts = [self.indices] + ([] if self.draws is None else self.draws.tensors())
        parts += [t for t in (self.values, self.lengths, self.labels) if t is not None]
        return sum(t.numel() * t.element_size() for t in parts)


def epoch_batches(
    n: int,
    batch_size: int,
    seed: int,
    epoch: int,
    augment: bool = True,
    padding: int = 2,
    flip: bool = True,
    resized: bool = False,
) -> Iterator[Batch]:
    """The batches of one epoch: a permutation of the n samples and, when `augment`, one shift (or,
    with `resized`, one random-resized crop box) and mirror draw per position, all from a CPU
    generator seeded by seed · 100003 + epoch."""
    generator = torch.Generator().manual_seed(seed * 100_003 + epoch)
    order = torch.randperm(n, generator=generator).to(torch.int32)
    on = augment and (padding > 0 or flip or resized)
    draws = AugmentDraws.draw(n, generator, padding, flip, resized) if on else None
    for start in range(0, n, batch_size):
        window = slice(start, start + batch_size)
        yield Batch(order[window], None if draws is None else draws.take(window))


def batch_inputs(
    images: torch.Tensor,
    batch: Batch,
    mean: tuple[float, ...] | None = None,
    std: tuple[float, ...] | None = None,
) -> torch.Tensor:
    """Float model input of `batch` from uint8 training images N×C×H×W (on any device): gather,
    augment, normalise (`to_model_input`) — on the images' device."""
    picked = images[batch.indices.to(images.device, torch.long)]
    if batch.draws is not None:
        picked = apply_augmentation(picked, batch.draws)
    return to_model_input(picked, mean, std)
