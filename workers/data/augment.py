"""Batch-level input pipeline: uint8 → float model input, and standard augmentation.

Augmentation is split in two: the random draws (`AugmentDraws`: a shift and a mirror bit per
sample, from a seeded CPU generator) and their application (`apply_augmentation`, vectorised, on
whatever device the images live). So the student and its teachers — in the same process, in a Ray
actor, on another device — build the very same augmented views from a few bytes per sample
(ELODI computes teacher logits online on the student's batch), and a run on a GPU draws exactly
what the same run draws on a CPU.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import torch

from workers.data.keys import GAMMA, splitmix64, unit

PIXEL_MEAN = 0.5  # inputs are mapped to [-1, 1]; a fixed map keeps checkpoints self-contained
PIXEL_STD = 0.5


def to_model_input(
    images: torch.Tensor, mean: tuple[float, ...] | None = None, std: tuple[float, ...] | None = None
) -> torch.Tensor:
    """uint8 N×C×H×W → float32 (x/255 − mean_c)/std_c per channel c, on the images' device; without
    mean/std the fixed map (x/255 − 0.5)/0.5 ∈ [−1, 1]."""
    x = images.to(torch.float32) / 255.0
    if mean is None or std is None:
        return (x - PIXEL_MEAN) / PIXEL_STD
    m = torch.tensor(mean, dtype=torch.float32, device=x.device).view(1, -1, 1, 1)
    s = torch.tensor(std, dtype=torch.float32, device=x.device).view(1, -1, 1, 1)
    return (x - m) / s


RESIZED_CROP_SCALE = (0.35, 1.0)  # random-resized crop: the share of the image's area a crop covers
RESIZED_CROP_RATIO = (3 / 4, 4 / 3)  # … and its aspect ratio (width / height), drawn log-uniformly


STATISTICS_CHUNK = 1 << 23  # values summed in float64 at a time (64 MiB), whatever the image size


def channel_statistics(images: torch.Tensor | Iterable[torch.Tensor]) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and standard deviation of x/255 over uint8 N×C×H×W images, or over batches
    of them (a stream's), summed in float64 chunks of STATISTICS_CHUNK values: a large split, or large
    images, never become one float tensor."""
    total = squares = None
    count = 0
    for batch in images.split(1024) if isinstance(images, torch.Tensor) else images:
        if total is None or squares is None:
            total = torch.zeros(batch.shape[1], dtype=torch.float64)
            squares = torch.zeros(batch.shape[1], dtype=torch.float64)
        for chunk in batch.split(max(1, STATISTICS_CHUNK // max(1, batch[0].numel()))):
            x = chunk.to(torch.float64) / 255.0
            total += x.sum((0, 2, 3))
            squares += (x * x).sum((0, 2, 3))
        count += batch.shape[0] * batch.shape[2] * batch.shape[3]
    assert total is not None and squares is not None, "channel statistics of no image"
    mean = total / count
    std = (squares / count - mean * mean).clamp(min=1e-12).sqrt()
    return tuple(round(float(v), 6) for v in mean), tuple(round(max(float(v), 1e-3), 6) for v in std)


@dataclass(frozen=True)
class AugmentDraws:
    """Per-sample draws: shifts in [0, 2·padding] (padding = no shift), or random-resized crop
    boxes (top, left, height, width as fractions of the image, float16), and a horizontal-mirror
    bit; None where that augmentation is off."""

    padding: int
    shift_y: torch.Tensor | None = None  # int8 B
    shift_x: torch.Tensor | None = None
    mirror: torch.Tensor | None = None  # bool B
    boxes: torch.Tensor | None = None  # float16 B×4: top, left, height, width in [0, 1]

    @staticmethod
    def draw(
        n: int, generator: torch.Generator, padding: int = 2, flip: bool = True, resized: bool = False
    ) -> AugmentDraws:
        """Random crop offsets (zero padding `padding`) or, with `resized`, random-resized crop boxes
        (Szegedy et al. 2015: area share in RESIZED_CROP_SCALE, aspect ratio in RESIZED_CROP_RATIO,
        a side longer than the image cut to it), and flips with probability ½ for n samples."""
        shift_y = shift_x = mirror = boxes = None
        if resized:
            boxes = resized_crop_boxes(n, generator)
        elif padding > 0:
            shift_y = torch.randint(0, 2 * padding + 1, (n,), generator=generator, dtype=torch.int8)
            shift_x = torch.randint(0, 2 * padding + 1, (n,), generator=generator, dtype=torch.int8)
        if flip:
            mirror = torch.rand(n, generator=generator) < 0.5
        return AugmentDraws(0 if resized else padding, shift_y, shift_x, mirror, boxes)

    def take(self, index: slice | torch.Tensor) -> AugmentDraws:
        def pick(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t[index]

        return AugmentDraws(self.padding, pick(self.shift_y), pick(self.shift_x), pick(self.mirror), pick(self.boxes))

    def tensors(self) -> list[torch.Tensor]:
        """The draws that are on (what a request carries)."""
        return [t for t in (self.shift_y, self.shift_x, self.mirror, self.boxes) if t is not None]


def resized_crop_boxes(n: int, generator: torch.Generator) -> torch.Tensor:
    """n boxes (top, left, height, width) as fractions of the image: area a ~ U(RESIZED_CROP_SCALE),
    log ratio r ~ U(log RESIZED_CROP_RATIO), placed by `crop_boxes`."""
    area = torch.empty(n).uniform_(*RESIZED_CROP_SCALE, generator=generator)
    low, high = (torch.log(torch.tensor(r)).item() for r in RESIZED_CROP_RATIO)
    ratio = torch.exp(torch.empty(n).uniform_(low, high, generator=generator))
    return crop_boxes(area, ratio, torch.rand(n, generator=generator), torch.rand(n, generator=generator))


def crop_boxes(area: torch.Tensor, ratio: torch.Tensor, top_u: torch.Tensor, left_u: torch.Tensor) -> torch.Tensor:
    """Boxes (top, left, height, width; float16 fractions) of area share `area` and aspect ratio
    `ratio`: width √(a·r) and height √(a/r) cut to 1, the corner at uniforms `top_u`, `left_u` of
    the room left where the box fits."""
    width = torch.sqrt(area * ratio).clamp(max=1.0)
    height = torch.sqrt(area / ratio).clamp(max=1.0)
    return torch.stack([top_u * (1 - height), left_u * (1 - width), height, width], 1).to(torch.float16)


def resized_crops(images: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
    """Each image's box (fractions: top, left, height, width) resampled bilinearly to the image's own
    H×W (torchvision's roi_align, one sample per output pixel at its aligned centre); same dtype
    (uint8 rounded) and device."""
    from torchvision.ops import roi_align

    n, _, h, w = images.shape
    b = boxes.to(images.device, torch.float32)
    top, left, height, width = b.unbind(1)
    rois = torch.stack(
        [
            torch.arange(n, device=images.device, dtype=torch.float32),
            left * w,
            top * h,
            (left + width) * w,
            (top + height) * h,
        ],
        1,
    )
    out = roi_align(images.to(torch.float32), rois, (h, w), spatial_scale=1.0, sampling_ratio=1, aligned=True)
    return out.round().clamp(0, 255).to(images.dtype) if images.dtype == torch.uint8 else out.to(images.dtype)


def apply_augmentation(images: torch.Tensor, draws: AugmentDraws) -> torch.Tensor:
    """Crop each sample of N×C×H×W `images` (uint8 or float) from its zero-padded copy at its drawn
    offset (or resample its drawn box to the full size), then mirror the ones drawn; same dtype and
    device."""
    n, c, h, w = images.shape
    out = images
    if draws.boxes is not None:
        out = resized_crops(images, draws.boxes)
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


def sample_uniforms(ids: torch.Tensor, seed: int, epoch: int, count: int) -> torch.Tensor:
    """float64 ids×count uniforms in [0, 1), a function of (seed, epoch, id) alone:
    splitmix64(id ⊕ splitmix64(seed · 100003 + epoch) + j·γ) for j < count."""
    stream = splitmix64(np.array([seed * 100_003 + epoch], dtype=np.uint64))[0]
    base = ids.cpu().numpy().astype(np.int64).view(np.uint64) ^ stream
    words = splitmix64(base[:, None] + np.arange(count, dtype=np.uint64)[None, :] * GAMMA)
    return torch.from_numpy(unit(words))


def sample_draws(
    ids: torch.Tensor, seed: int, epoch: int, padding: int = 2, flip: bool = True, resized: bool = False
) -> AugmentDraws | None:
    """Each sample's augmentation in `epoch`, from its id (`sample_uniforms`): a shift in
    [0, 2·padding] per axis, or a random-resized crop box (the distribution of
    `augment.resized_crop_boxes`), and a mirror bit with probability ½; None when all are off."""
    if not (resized or padding > 0 or flip):
        return None
    u = sample_uniforms(ids, seed, epoch, 5).float()
    shift_y = shift_x = mirror = boxes = None
    if resized:
        area = RESIZED_CROP_SCALE[0] + (RESIZED_CROP_SCALE[1] - RESIZED_CROP_SCALE[0]) * u[:, 0]
        low, high = (float(np.log(r)) for r in RESIZED_CROP_RATIO)
        boxes = crop_boxes(area, torch.exp(low + (high - low) * u[:, 1]), u[:, 2], u[:, 3])
    elif padding > 0:
        shift_y = (u[:, 0] * (2 * padding + 1)).floor().clamp(max=2 * padding).to(torch.int8)
        shift_x = (u[:, 1] * (2 * padding + 1)).floor().clamp(max=2 * padding).to(torch.int8)
    if flip:
        mirror = u[:, 4] < 0.5
    return AugmentDraws(0 if resized else padding, shift_y, shift_x, mirror, boxes)
