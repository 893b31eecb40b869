"""Confidence bounds of the rates a promotion gates on.

NFR and the ER change are proportions over the eval split: on a few thousand samples their
sampling noise is as large as the differences a gate is set to catch. A gate at confidence c uses
one-sided upper bounds, each with z = Φ⁻¹(c):

- a rate k / n (NFR): the Wilson score bound
  (p̂ + z²/2n + z·√(p̂(1 − p̂)/n + z²/4n²)) / (1 + z²/n), p̂ = k/n;
- the ER increase of a new model over an old one on the same n samples (paired, McNemar's
  conditioning): of the d = b + c samples on which exactly one of them is right, b (old right, new
  wrong) is Binomial(d, π) and the increase is (b − c)/n = d·(2π − 1)/n, so the Wilson bound of
  π = b/d gives the increase's bound.
"""

from __future__ import annotations

import math
from statistics import NormalDist


def _z(confidence: float) -> float:
    if not 0.5 <= confidence < 1.0:
        raise ValueError(f"a confidence level lies in [0.5, 1), not {confidence}")
    return NormalDist().inv_cdf(confidence)


def wilson_upper(k: int, n: int, confidence: float) -> float:
    """One-sided upper bound at `confidence` of a proportion seen as k of n (Wilson score); 1 when n = 0."""
    if not 0 <= k <= n:
        raise ValueError(f"k = {k} is not within 0..n = {n}")
    if n == 0:
        return 1.0
    z, p = _z(confidence), k / n
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return min(1.0, (centre + spread) / (1 + z * z / n))


def paired_increase_upper(worse: int, better: int, n: int, confidence: float) -> float:
    """One-sided upper bound at `confidence` of ER_new − ER_old over the same n samples, from
    `worse` = b (old right, new wrong) and `better` = c (old wrong, new right); 0 when b + c = 0
    (both models wrong on the same samples: no evidence of a change either way)."""
    discordant = worse + better
    if discordant > n or worse < 0 or better < 0:
        raise ValueError(f"{worse} + {better} discordant samples out of {n}")
    if discordant == 0:
        return 0.0
    return discordant * (2 * wilson_upper(worse, discordant, confidence) - 1) / n
