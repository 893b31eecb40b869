"""Confidence bounds of the rates a promotion gates on.

NFR and the ER change are proportions over the eval split: on a few thousand samples their
sampling noise is as large as the differences a gate is set to catch. A gate at confidence c uses
one-sided upper bounds, each with z = Φ⁻¹(c):

- a rate k / n (NFR): the Wilson score bound
  (p̂ + z²/2n + z·√(p̂(1 − p̂)/n + z²/4n²)) / (1 + z²/n), p̂ = k/n;
- the ER increase of a new model over an old one on the same n samples (paired): of the n samples,
  b are right by the old model and wrong by the new, c the other way round, and the increase is
  Δ = (b − c)/n. Its bound is Tango's score bound (Tango 1998, Stat. Med. 17:891): the Δ above
  Δ̂ where T(Δ) = (b − c − nΔ) / √(n(2q̃ + Δ(1 − Δ))) = −z, q̃ the maximum-likelihood probability
  of the c cell under Δ, q̃ = (√(B² − 4AC) − B) / 2A with A = 2n, B = −b − c + (2n − b + c)Δ,
  C = −cΔ(1 − Δ). Unlike conditioning on b + c (McNemar), it counts the discordant total's own
  noise, so it covers at its level when the ER changes (tests/test_confidence.py simulates it).
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


def wilson_lower(k: int, n: int, confidence: float) -> float:
    """One-sided lower bound at `confidence` of a proportion seen as k of n (Wilson score): the upper
    bound of the complement, 1 − upper(n − k, n); 0 when n = 0."""
    if not 0 <= k <= n:
        raise ValueError(f"k = {k} is not within 0..n = {n}")
    return 0.0 if n == 0 else max(0.0, 1.0 - wilson_upper(n - k, n, confidence))


def fewest_for_bound(limit: float, confidence: float) -> int:
    """The fewest n at which a proportion seen as 0 of n can have its Wilson upper bound at
    `confidence` within `limit`: wilson_upper(0, n) = z²/(n + z²) ≤ limit ⇔ n ≥ z²(1 − limit)/limit.
    A gate on that bound cannot pass on fewer samples, whatever they show."""
    if not 0 < limit <= 1:
        raise ValueError(f"limit = {limit} is not within (0, 1]")
    z2 = _z(confidence) ** 2
    n = max(1, math.ceil(z2 * (1 - limit) / limit - 1e-9))
    while wilson_upper(0, n, confidence) > limit:  # rounding at the boundary
        n += 1
    return n


def tango_statistic(worse: float, better: float, n: float, delta: float) -> float:
    """Tango's score statistic T(Δ) of b = `worse`, c = `better` of n pairs (module docstring)."""
    a, b = 2 * n, -worse - better + (2 * n - worse + better) * delta
    c = -better * delta * (1 - delta)
    q = (math.sqrt(max(b * b - 4 * a * c, 0.0)) - b) / (2 * a)
    variance = n * (2 * q + delta * (1 - delta))
    return (worse - better - n * delta) / math.sqrt(variance) if variance > 0 else -math.inf


def paired_increase_upper(worse: float, better: float, n: float, confidence: float) -> float:
    """One-sided upper bound at `confidence` of ER_new − ER_old over the same n samples, from
    `worse` = b (old right, new wrong) and `better` = c (old wrong, new right): Tango's score bound
    (module docstring), found by bisection on T(Δ) = −z, which falls as Δ rises. The counts may be
    effective ones (counts over a design effect, policy/auto_choice.py)."""
    if worse + better > n or worse < 0 or better < 0:
        raise ValueError(f"{worse} + {better} discordant samples out of {n}")
    z = _z(confidence)
    if n == 0 or worse == n:
        return 1.0
    low, high = (worse - better) / n, 1.0
    for _ in range(60):  # 2⁻⁶⁰ of the bracket: far below a sample's 1/n
        middle = (low + high) / 2
        if tango_statistic(worse, better, n, middle) > -z:
            low = middle
        else:
            high = middle
    return high


def corrected_resampled_effect(trained: int, folds: int) -> float:
    """The design effect of counts pooled over `trained` of `folds` cross-fitted folds, each predicted
    by a model trained on the other folds (the corrected resampled t-test, Nadeau & Bengio 2003,
    Mach. Learn. 52:239): the variance of a mean over J train/test splits is (1/J + n_test/n_train)·σ²,
    not σ²/J; with J of K folds n_test/n_train = 1/(K − 1), so the variance is 1 + J/(K − 1) times the
    naive one (2.25 for 5 of 5 folds, 1.33 for 3 of 10). The training sets overlap, so the folds'
    models err alike, and pooled counts hold less information than as many independent samples."""
    if not 2 <= folds or not 1 <= trained <= folds:
        raise ValueError(f"cross-fitting trains 1 to K of K ≥ 2 folds, not {trained} of {folds}")
    return 1.0 + trained / (folds - 1)
