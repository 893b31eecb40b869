"""What a sample is, wherever it is read: a stable key, its split and its augmentation, all from
hashes — so no process ever permutes or holds all N samples (a streamed source, docs/architecture.md).

- A sample's **key** is what names it in its source: an image's path relative to the folder's root,
  a text's content with leading and trailing whitespace stripped (so every copy of a duplicated text
  has one key and lands on one side of every split).
- Its **hash** h is the first 8 bytes (little-endian) of sha256(key, UTF-8); its **id** is h >> 1
  (a non-negative int64, the same in every process and every run).
- Its **split** follows from u = splitmix64(h ⊕ SPLIT_SEED) / 2⁶⁴ ∈ [0, 1): eval when
  u ≥ 1 − eval_fraction, val when u ≥ (1 − eval_fraction)(1 − val_fraction), else train.
- Its **augmentation** in an epoch is drawn from uniforms splitmix64(id ⊕ stream(seed, epoch) + j·γ)
  (j = 0, 1, …: one per draw), so the student and every teacher, in any process and any batch order,
  see the same augmented sample.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import torch

from workers.data.augment import RESIZED_CROP_RATIO, RESIZED_CROP_SCALE, AugmentDraws, crop_boxes

SPLIT_SEED = 20240601  # the same fixed seed as the in-memory splits: splits must not move with the training seed
TRAIN, VAL, EVAL = 0, 1, 2  # split codes
_GAMMA = np.uint64(0x9E3779B97F4A7C15)  # the golden-ratio increment of splitmix64


def splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser of uint64 x (Steele, Lea & Flood 2014): a bijection whose outputs
    pass as independent uniform 64-bit words for consecutive or structured inputs."""
    z = x.astype(np.uint64) + _GAMMA
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def key_hashes(keys: Sequence[str]) -> np.ndarray:
    """uint64 per key: the first 8 bytes of sha256(key as UTF-8), little-endian."""
    out = np.empty(len(keys), dtype=np.uint64)
    for i, key in enumerate(keys):
        out[i] = int.from_bytes(hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()[:8], "little")
    return out


def text_keys(texts: Sequence[str]) -> list[str]:
    """A text's key: its content without leading and trailing whitespace (duplicates share it)."""
    return [text.strip() for text in texts]


def sample_ids(hashes: np.ndarray) -> np.ndarray:
    """int64 ids h >> 1 of uint64 key hashes h (non-negative, stable)."""
    return (hashes >> np.uint64(1)).astype(np.int64)


def _unit(words: np.ndarray) -> np.ndarray:
    """float64 in [0, 1) from uint64 words: their top 53 bits / 2⁵³."""
    return (words >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def split_codes(hashes: np.ndarray, val_fraction: float, eval_fraction: float) -> np.ndarray:
    """int8 per sample: TRAIN, VAL or EVAL by u = splitmix64(h ⊕ SPLIT_SEED) / 2⁶⁴ (module docstring)."""
    if not 0 < val_fraction < 1 or not 0 < eval_fraction < 1:
        raise ValueError("val_fraction and eval_fraction must lie strictly between 0 and 1")
    u = _unit(splitmix64(hashes.astype(np.uint64) ^ np.uint64(SPLIT_SEED)))
    codes = np.full(len(u), TRAIN, dtype=np.int8)
    codes[u >= (1 - eval_fraction) * (1 - val_fraction)] = VAL
    codes[u >= 1 - eval_fraction] = EVAL
    return codes


def sample_uniforms(ids: torch.Tensor, seed: int, epoch: int, count: int) -> torch.Tensor:
    """float64 ids×count uniforms in [0, 1), a function of (seed, epoch, id) alone:
    splitmix64(id ⊕ splitmix64(seed · 100003 + epoch) + j·γ) for j < count."""
    stream = splitmix64(np.array([seed * 100_003 + epoch], dtype=np.uint64))[0]
    base = ids.cpu().numpy().astype(np.int64).view(np.uint64) ^ stream
    words = splitmix64(base[:, None] + np.arange(count, dtype=np.uint64)[None, :] * _GAMMA)
    return torch.from_numpy(_unit(words))


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
