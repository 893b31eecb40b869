"""Batch-level input pipeline: uint8 → float model input, and standard augmentation.

Augmentation runs on whole batches (vectorised), so the student and its teachers can be given the
very same augmented views (ELODI computes teacher logits online on the student's batch).
"""

from __future__ import annotations

import torch

PIXEL_MEAN = 0.5  # inputs are mapped to [-1, 1]; a fixed map keeps checkpoints self-contained
PIXEL_STD = 0.5


def to_model_input(images: torch.Tensor) -> torch.Tensor:
    """uint8 N×C×H×W → float32 (x/255 − 0.5)/0.5 ∈ [−1, 1]."""
    return (images.to(torch.float32) / 255.0 - PIXEL_MEAN) / PIXEL_STD


def augment_batch(
    images: torch.Tensor, generator: torch.Generator, padding: int = 2, flip: bool = True
) -> torch.Tensor:
    """Random crop with zero padding (each sample shifted by up to ±`padding` pixels) and random
    horizontal flip with probability ½. Works on uint8 or float N×C×H×W; returns the same dtype."""
    n, c, h, w = images.shape
    out = images
    if padding > 0:
        padded = torch.nn.functional.pad(images, (padding, padding, padding, padding))
        dy = torch.randint(0, 2 * padding + 1, (n,), generator=generator)
        dx = torch.randint(0, 2 * padding + 1, (n,), generator=generator)
        rows = (dy[:, None] + torch.arange(h))[:, None, :, None]
        cols = (dx[:, None] + torch.arange(w))[:, None, None, :]
        batch = torch.arange(n)[:, None, None, None]
        channel = torch.arange(c)[None, :, None, None]
        out = padded[batch, channel, rows, cols]
    if flip:
        mirror = torch.rand(n, generator=generator) < 0.5
        out = torch.where(mirror[:, None, None, None], out.flip(-1), out)
    return out
