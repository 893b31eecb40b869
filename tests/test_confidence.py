"""Upper confidence bounds of NFR and of the ER increase (workers/confidence.py), against values
worked by hand, against the score equations they solve, and the ER increase's coverage simulated."""

import math
from statistics import NormalDist

import numpy as np
import pytest

from reliability_records import record
from workers.confidence import paired_increase_upper, wilson_upper


def test_wilson_upper_bound_by_hand():
    # k = 0: the bound is z² / (n + z²); z(0.975) = 1.959964: 3.841459 / 13.841459 = 0.27753,
    # the textbook 95 % two-sided Wilson interval's upper end for 0 of 10
    assert wilson_upper(0, 10, 0.975) == pytest.approx(0.27753, abs=1e-5)
    assert wilson_upper(0, 100, 0.95) == pytest.approx(2.705543 / 102.705543, rel=1e-6)  # 2.63 %
    assert wilson_upper(10, 10, 0.95) == 1.0
    assert wilson_upper(0, 0, 0.95) == 1.0  # no samples: nothing is known


@pytest.mark.parametrize(("k", "n", "level"), [(1, 10, 0.95), (10, 100, 0.95), (37, 2000, 0.99), (500, 1000, 0.8)])
def test_wilson_upper_bound_solves_the_score_equation(k, n, level):
    """The Wilson upper bound p is the root above k/n of (p − k/n) / √(p(1 − p)/n) = z."""
    p, z = wilson_upper(k, n, level), {0.95: 1.6448536, 0.99: 2.3263479, 0.8: 0.8416212}[level]
    assert p > k / n
    assert (p - k / n) / math.sqrt(p * (1 - p) / n) == pytest.approx(z, rel=1e-6)


def test_paired_increase_upper_bound_by_hand():
    # no discordant sample: T(Δ) = −√(nΔ/(1 − Δ)), so the bound is z²/(n + z²) = 2.705543/102.705543
    # at 95 % over 100 (not 0: 100 samples alike do not show the ER cannot have risen)
    assert paired_increase_upper(0, 0, 100, 0.95) == pytest.approx(2.705543 / 102.705543, rel=1e-6)
    assert paired_increase_upper(100, 0, 100, 0.95) == 1.0  # every sample lost: nothing above
    assert paired_increase_upper(0, 0, 0, 0.95) == 1.0  # no samples: nothing is known


@pytest.mark.parametrize(
    ("worse", "better", "n", "level"), [(0, 10, 100, 0.95), (10, 10, 1000, 0.95), (40, 20, 160, 0.975), (3, 1, 50, 0.8)]
)
def test_paired_increase_upper_bound_solves_tangos_score_equation(worse, better, n, level):
    """The bound Δ is the root above (b − c)/n of Tango's T(Δ) = −z, q̃ recomputed here from its
    quadratic n·2q̃² + … : 2n q̃² + B q̃ + C = 0 (module docstring of workers/confidence.py)."""
    upper, z = paired_increase_upper(worse, better, n, level), NormalDist().inv_cdf(level)
    assert upper > (worse - better) / n
    a, b = 2 * n, -worse - better + (2 * n - worse + better) * upper
    c = -better * upper * (1 - upper)
    q = max(np.roots([a, b, c]).real)  # the non-negative root
    assert (worse - better - n * upper) / math.sqrt(n * (2 * q + upper * (1 - upper))) == pytest.approx(-z, rel=1e-6)


@pytest.mark.parametrize("n", [100, 500, 2000])
@pytest.mark.parametrize(
    ("p_worse", "p_better"), [(0.05, 0.05), (0.08, 0.03), (0.03, 0.08), (0.02, 0.005), (0.15, 0.05)]
)
def test_paired_increase_upper_bound_covers_at_its_level(n, p_worse, p_better):
    """Over 10,000 simulated eval splits of n samples, the 95 % upper bound is at or above the true
    ER increase p_worse − p_better in at least 94 % of them, whether the ER rises, falls or stays.
    (Conditioning on the discordant count, the bound before covered 0.67–0.92 where it changed.)"""
    rng = np.random.default_rng(0)
    cells = rng.multinomial(n, [p_worse, p_better, 1 - p_worse - p_better], size=10_000)[:, :2]
    pairs, counts = np.unique(cells, axis=0, return_counts=True)
    covered = sum(
        int(count)
        for (worse, better), count in zip(pairs.tolist(), counts, strict=True)
        if p_worse - p_better <= paired_increase_upper(worse, better, n, 0.95) + 1e-12
    )
    coverage = covered / 10_000
    check = f"95 % ER-increase bound covers the true change (n {n}, {p_worse - p_better:+.3f}): {coverage:.3f}"
    record("security", check=check, passed=coverage >= 0.94)
    assert coverage >= 0.94


def test_bad_counts_and_levels_are_refused():
    with pytest.raises(ValueError, match="confidence level"):
        wilson_upper(1, 10, 0.3)
    with pytest.raises(ValueError, match="not within"):
        wilson_upper(11, 10, 0.95)
    with pytest.raises(ValueError, match="discordant"):
        paired_increase_upper(60, 50, 100, 0.95)
