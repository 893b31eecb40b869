"""Upper confidence bounds of NFR and of the ER increase (workers/confidence.py), against values
worked by hand and against the score equation the Wilson bound solves."""

import math

import pytest

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
    # 0 worse, 10 better of 100: π ≤ z²/(10 + z²) = 2.705543/12.705543 = 0.212942 at 95 %,
    # increase ≤ 10 · (2 · 0.212942 − 1) / 100 = −5.74 pt: the new model is better, surely
    assert paired_increase_upper(0, 10, 100, 0.95) == pytest.approx(-0.0574116, abs=1e-6)
    # 10 worse, 10 better: the point value is 0, its bound above 0
    upper = paired_increase_upper(10, 10, 1000, 0.95)
    half = wilson_upper(10, 20, 0.95) - 0.5
    assert upper == pytest.approx(20 * 2 * half / 1000) and upper > 0
    assert paired_increase_upper(0, 0, 100, 0.95) == 0.0  # no discordant sample: no evidence of a change


def test_bad_counts_and_levels_are_refused():
    with pytest.raises(ValueError, match="confidence level"):
        wilson_upper(1, 10, 0.3)
    with pytest.raises(ValueError, match="not within"):
        wilson_upper(11, 10, 0.95)
    with pytest.raises(ValueError, match="discordant"):
        paired_increase_upper(60, 50, 100, 0.95)
