"""What a sample is, wherever it is read: a stable key, its split and its augmentation, all from
hashes — so no process ever permutes or holds all N samples (a streamed source, docs/architecture.md).

- A sample's **key** is what names it in its source: the value of the user's `data.id_column`
  when there is one; else an image's path relative to the folder's root (`train/7` for the 8th
  image of an IDX or .npz file), a text's content with leading and trailing whitespace stripped
  (so every copy of a duplicated text has one key and lands on one side of every split).
- Its **hash** h is the first 8 bytes (little-endian) of sha256(key, UTF-8); its **id** is h >> 1
  (a non-negative int64, the same in every process and every run). Ledgers are keyed by it.
- Its **split** follows from its id, in memory and streamed alike (issue 49: a sample keeps its
  split when rows, files or shards are added, and when `streaming` changes):
  u = splitmix64(id ⊕ SPLIT_SEED) / 2⁶⁴ ∈ [0, 1): eval when u ≥ 1 − eval_fraction, val when
  u ≥ (1 − eval_fraction)(1 − val_fraction), else train (a source with its own test set: val when
  u ≥ 1 − val_fraction).
- Its **rank** within a split, splitmix64(id ⊕ salt), orders the filters that are not about one
  sample alone (`Selection`: `train_limit`, `eval_limit` keep the N lowest ranks; `half-samples`
  the ids whose rank falls in the lower half), so they are filters of ids a stream applies too.
- Its **augmentation** in an epoch is drawn from uniforms splitmix64(id ⊕ stream(seed, epoch) + j·γ)
  (j = 0, 1, …: one per draw), so the student and every teacher, in any process and any batch order,
  see the same augmented sample (`augment.sample_draws`).

numpy only: Ray Data's reading tasks compute keys, ids and splits without loading torch.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

SPLIT_RULE = "ids-v2"  # what fingerprints name: splits by hashes of ids (v1: permutations in memory)
SPLIT_SEED = 20240601  # fixed: splits must not move with the training seed
HALF_SEED = 0x48A1F5  # the rank `half-samples` keeps the lower half of
LIMIT_SEED = 0x11A175  # the rank `train_limit` and `eval_limit` keep the lowest of
TOKENIZER_SEED = 0x70CE2  # the rank a streamed split's tokenizer sample is the lowest of
TRAIN, VAL, EVAL = 0, 1, 2  # split codes
GAMMA = np.uint64(0x9E3779B97F4A7C15)  # the golden-ratio increment of splitmix64


def splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser of uint64 x (Steele, Lea & Flood 2014): a bijection whose outputs
    pass as independent uniform 64-bit words for consecutive or structured inputs."""
    z = x.astype(np.uint64) + GAMMA
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


def key_ids(keys: Sequence[str]) -> np.ndarray:
    """int64 ids of sample keys: `sample_ids(key_hashes(keys))`."""
    return sample_ids(key_hashes(keys))


def rank(ids: np.ndarray, salt: int) -> np.ndarray:
    """uint64 splitmix64(id ⊕ salt) per id: an order of the ids independent of how they were read."""
    return splitmix64(np.asarray(ids).astype(np.uint64) ^ np.uint64(salt))


def unit(words: np.ndarray) -> np.ndarray:
    """float64 in [0, 1) from uint64 words: their top 53 bits / 2⁵³."""
    return (words >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def split_codes(ids: np.ndarray, val_fraction: float, eval_fraction: float) -> np.ndarray:
    """int8 per sample: TRAIN, VAL or EVAL by u = splitmix64(id ⊕ SPLIT_SEED) / 2⁶⁴ (module
    docstring); `eval_fraction` 0: a source whose own test set is the eval split (no EVAL here)."""
    if not 0 < val_fraction < 1 or not 0 <= eval_fraction < 1:
        raise ValueError("val_fraction and eval_fraction must lie strictly between 0 and 1")
    u = unit(rank(ids, SPLIT_SEED))
    codes = np.full(len(u), TRAIN, dtype=np.int8)
    codes[u >= (1 - eval_fraction) * (1 - val_fraction)] = VAL
    if eval_fraction > 0:
        codes[u >= 1 - eval_fraction] = EVAL
    return codes
