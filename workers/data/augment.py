"""Batch-level input pipeline: uint8 → float model input, and standard augmentation.

Augmentation is split in two: the random draws (`AugmentDraws`: a shift and a mirror bit per
sample, from a seeded CPU generator) and their application (`apply_augmentation`, vectorised, on
whatever device the images live). So the student and its teachers — in the same process, in a Ray
actor, on another device — build the very same augmented views from a few bytes per sample
(ELODI computes teacher logits online on the student's batch), and a run on a GPU draws exactly
what the same run draws on a CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

PIXEL_MEAN = 0.5  # inputs are mapped to [-1, 1]; a fixed map keeps checkpoints self-contained
PIXEL_STD = 0.5


def to_model_input(images: torch.Tensor) -> torch.Tensor:
    """uint8 N×C×H×W → float32 (x/255 − 0.5)/0.5 ∈ [−1, 1], on the images' device."""
    return (images.to(torch.float32) / 255.0 - PIXEL_MEAN) / PIXEL_STD


@dataclass(frozen=True)
class AugmentDraws:
    """Per-sample draws: shifts in [0, 2·padding] (padding = no shift) and a horizontal-mirror bit;
    None where that augmentation is off."""

    padding: int
    shift_y: torch.Tensor | None = None  # int8 B
    shift_x: torch.Tensor | None = None
    mirror: torch.Tensor | None = None  # bool B

    @staticmethod
    def draw(n: int, generator: torch.Generator, padding: int = 2, flip: bool = True) -> AugmentDraws:
        """Random crop offsets (zero padding `padding`) and flips with probability ½ for n samples."""
        shift_y = shift_x = mirror = None
        if padding > 0:
            shift_y = torch.randint(0, 2 * padding + 1, (n,), generator=generator, dtype=torch.int8)
            shift_x = torch.randint(0, 2 * padding + 1, (n,), generator=generator, dtype=torch.int8)
        if flip:
            mirror = torch.rand(n, generator=generator) < 0.5
        return AugmentDraws(padding, shift_y, shift_x, mirror)

    def take(self, index: slice | torch.Tensor) -> AugmentDraws:
        def pick(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t[index]

        return AugmentDraws(self.padding, pick(self.shift_y), pick(self.shift_x), pick(self.mirror))


def apply_augmentation(images: torch.Tensor, draws: AugmentDraws) -> torch.Tensor:
    """Crop each sample of N×C×H×W `images` (uint8 or float) from its zero-padded copy at its drawn
    offset, then mirror the ones drawn; same dtype and device."""
    n, c, h, w = images.shape
    out = images
    if draws.shift_y is not None and draws.padding > 0:
        assert draws.shift_x is not None  # drawn together with shift_y
        p, device = draws.padding, images.device
        padded = torch.nn.functional.pad(images, (p, p, p, p))
        dy, dx = draws.shift_y.to(device, torch.long), draws.shift_x.to(device, torch.long)
        rows = (dy[:, None] + torch.arange(h, device=device))[:, None, :, None]
        cols = (dx[:, None] + torch.arange(w, device=device))[:, None, None, :]
        batch = torch.arange(n, device=device)[:, None, None, None]
        channel = torch.arange(c, device=device)[None, :, None, None]
        out = padded[batch, channel, rows, cols]
    if draws.mirror is not None:
        out = torch.where(draws.mirror.to(images.device)[:, None, None, None], out.flip(-1), out)
    return out


def augment_batch(
    images: torch.Tensor, generator: torch.Generator, padding: int = 2, flip: bool = True
) -> torch.Tensor:
    """Random crop with zero padding (each sample shifted by up to ±`padding` pixels) and random
    horizontal flip with probability ½. Works on uint8 or float N×C×H×W; returns the same dtype."""
    return apply_augmentation(images, AugmentDraws.draw(len(images), generator, padding, flip))
