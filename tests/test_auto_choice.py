"""auto's choice (orchestrator/policy/auto_choice.py): paired counts, the two one-sided tests, the
fixed order, the closest-candidate line, and what pooling cross-fitted folds buys."""

import numpy as np
import pytest

from orchestrator.policy.auto_choice import PairedCounts, candidate_test, choose, closest, fixed_sequence, futile
from workers.confidence import corrected_resampled_effect

LIMIT, LEVEL = 0.003, 0.95


def test_paired_counts_count_discordant_errors_and_flips_on_the_old_models_classes():
    """Six samples, hand-counted: old right on 0-3; none wrong on 1 and 4; the candidate wrong on 2
    and 5; sample 3's class is unknown to the old model."""
    labels = np.array([0, 1, 2, 3, 4, 5])
    old = np.array([0, 1, 2, 3, 0, 0])
    none = np.array([0, 9, 2, 3, 9, 5])
    new = np.array([0, 1, 9, 3, 4, 9])
    known = np.array([True, True, True, False, True, True])
    c = PairedCounts.of(old, none, new, labels, known)
    assert (c.n, c.worse, c.better) == (6, 2, 2)  # worse: 2, 5; better: 1, 4
    assert (c.n_known, c.flips, c.none_flips, c.more_flips, c.fewer_flips) == (5, 1, 1, 1, 1)
    assert c.er_change == 0 and c.nfr == pytest.approx(1 / 5) and c.nfr_change == 0
    pooled = c + c
    assert (pooled.n, pooled.worse, pooled.more_flips) == (12, 4, 2)


def test_the_er_bound_is_tangos_paired_bound_near_its_normal_approximation():
    """b = c' = 50 of 4,350: ΔER = 0 and its standard error √(b + c')/n = 0.23 pt, so the 95 % bound is
    about 1.645 × 0.23 = 0.38 pt (Tango's is a little wider, as a score bound is at small counts)."""
    c = PairedCounts(4350, 50, 50, 4350, 40, 80, 10, 50)
    assert c.er_change_upper(LEVEL) == pytest.approx(1.645 * 10 / 4350, rel=0.03)
    assert c.nfr_change == pytest.approx(-40 / 4350)
    assert c.nfr_change_upper(LEVEL) < 0  # 10 against 50: proven to flip less


def test_a_candidate_inside_the_bound_on_its_point_estimate_but_not_on_its_upper_bound_does_not_ship():
    """kd's val ER change is 0 (inside +0.3 pt) and it flips far less, but its 95 % bound is +0.38 pt:
    no treatment ships, and one line says kd came closest and by how much."""
    kd = PairedCounts(4350, 50, 50, 4350, 40, 80, 10, 50)
    tests = fixed_sequence([("kd", kd, None)], LIMIT, LEVEL)
    assert not tests[0].passed and "ER bound +0.38 pt > +0.30" in tests[0].failed[0]
    assert choose(tests) == "none"
    line = closest(tests, LIMIT)
    assert line == (
        "kd came closest: ER +0.00 pt, bound +0.38 > +0.30; NFR -0.92 pt against no treatment's, "
        "bound -0.64 over 4,350 val samples"
    )


def test_the_same_candidate_pooled_over_five_cross_fitted_folds_is_proven_and_ships():
    """The same rates on five times the samples (train ∪ val in 5 folds), discounted by the corrected
    resampled design effect (2.25 for 5 of 5 folds): the bound falls to +0.26 pt and kd ships."""
    assert corrected_resampled_effect(5, 5) == pytest.approx(2.25)
    assert corrected_resampled_effect(3, 10) == pytest.approx(1 + 3 / 9)
    with pytest.raises(ValueError, match="1 to K"):
        corrected_resampled_effect(11, 10)
    pooled = PairedCounts(21750, 250, 250, 21750, 200, 400, 50, 250, corrected_resampled_effect(5, 5))
    tests = fixed_sequence([("kd", pooled, None)], LIMIT, LEVEL)
    assert tests[0].passed and tests[0].er_upper == pytest.approx(0.00255, abs=5e-5)
    assert choose(tests) == "kd"
    assert closest(tests, LIMIT) is None
    # without the design effect the bound would be narrower still: it is what keeps the claim honest
    naive = PairedCounts(21750, 250, 250, 21750, 200, 400, 50, 250)
    assert naive.er_change_upper(LEVEL) < pooled.er_change_upper(LEVEL)


def test_the_fixed_order_stops_at_the_first_candidate_that_fails():
    """bcwi passes, kd fails its ER bound, fd-lm would pass but comes after kd: it is not tested and
    cannot ship however few it flips; bcwi ships."""
    good = PairedCounts(20000, 100, 100, 20000, 50, 300, 20, 270)
    costly = PairedCounts(20000, 300, 100, 20000, 50, 300, 20, 270)
    best = PairedCounts(20000, 90, 100, 20000, 10, 300, 0, 290)
    tests = fixed_sequence([("bcwi", good, None), ("kd", costly, None), ("fd-lm", best, None)], LIMIT, LEVEL)
    assert [(t.name, t.tested, t.passed) for t in tests] == [
        ("bcwi", True, True),
        ("kd", True, False),
        ("fd-lm", False, False),
    ]
    assert choose(tests) == "bcwi"
    # in the other order fd-lm is tested first and ships
    tests = fixed_sequence([("fd-lm", best, None), ("bcwi", good, None), ("kd", costly, None)], LIMIT, LEVEL)
    assert choose(tests) == "fd-lm"


def test_a_candidate_must_be_proven_to_flip_less_and_a_val_slice_over_the_gate_fails_it():
    """Equal flips (NFR bound ≥ 0) fail however cheap the candidate is; a slice over the gate fails a
    candidate that passes both bounds."""
    even = PairedCounts(20000, 50, 100, 20000, 100, 100, 30, 30)
    assert candidate_test("kd", even, LIMIT, LEVEL).failed == (
        "NFR not proven lower (bound +0.07 pt ≥ 0)",
    )  # ≈ 1.645·√60/20,000
    good = PairedCounts(20000, 100, 100, 20000, 50, 300, 20, 270)
    over = candidate_test("kd", good, LIMIT, LEVEL, "lang=de NFR 9.00% > 5.00% on 40")
    assert over.failed == ("val slice lang=de NFR 9.00% > 5.00% on 40",)


def test_the_family_ships_a_candidate_over_the_bound_at_most_five_percent_of_the_time():
    """Simulated: three candidates whose true ER change is exactly at the limit (+0.3 pt, the worst
    case a claim can be false at) and which truly flip less. Over 2,000 draws of 4,000 val samples
    the fixed order ships any of them in ≤ 5 % of draws (plus simulation noise), where picking on
    point estimates (the old rule) ships one in most draws."""
    rng = np.random.default_rng(0)
    n, shipped, shipped_on_points = 4000, 0, 0
    for _ in range(2000):
        ordered = []
        for _name in ("a", "b", "c"):
            # per sample: P(worse) = 3 %, P(better) = 2.7 %: ER change +0.3 pt; flips 2 % against 3 %
            draws = rng.multinomial(n, [0.03, 0.027, 0.943])
            flips = rng.multinomial(n, [0.005, 0.015, 0.98])
            counts = PairedCounts(n, int(draws[0]), int(draws[1]), n, 0, 0, int(flips[0]), int(flips[1]))
            ordered.append((_name, counts, None))
        tests = fixed_sequence(ordered, LIMIT, LEVEL)
        shipped += any(t.passed for t in tests)
        shipped_on_points += any(c.er_change <= LIMIT for _, c, _ in ordered)
    assert shipped / 2000 <= 0.05 + 0.015
    assert shipped_on_points / 2000 > 0.5


def test_counts_of_another_design_pool_as_effective_counts():
    """Fold counts over a design effect of 2 count as half as many samples: pooled with val's they
    narrow the bound less than as many val samples would, and more than val alone."""
    val = PairedCounts(4350, 50, 50, 4350, 40, 80, 10, 50)
    folds = PairedCounts(4350, 50, 50, 4350, 40, 80, 10, 50, design_effect=2.0)
    assert folds.effective() == PairedCounts(2175, 25, 25, 2175, 20, 40, 5, 25)
    pooled = val.effective() + folds.effective()
    doubled = val + PairedCounts(4350, 50, 50, 4350, 40, 80, 10, 50)
    assert doubled.er_change_upper(LEVEL) < pooled.er_change_upper(LEVEL) < val.er_change_upper(LEVEL)


def test_a_candidate_the_folds_could_not_prove_at_its_val_figures_is_futile():
    """kd at ΔER 0, bound +0.38 pt on 4,350 val samples: 1,000 more effective samples at the same
    proportions would leave the bound at +0.34 (futile), 4,000 more bring it under +0.30 (worth the
    folds). ΔER +0.46 pt is futile whatever the samples, a val slice over the gate too; a candidate
    that already passes on val is never called futile (more evidence is only taken, not skipped)."""
    kd = PairedCounts(4350, 50, 50, 4350, 40, 80, 10, 50)
    assert futile(kd, 1000, LIMIT, LEVEL) == ("ER bound +0.34 pt > +0.30",)
    assert futile(kd, 4000, LIMIT, LEVEL) == ()
    assert kd.scaled(2) == PairedCounts(8700, 100, 100, 8700, 80, 160, 20, 100)
    worse = PairedCounts(4350, 70, 50, 4350, 40, 80, 10, 50)
    assert futile(worse, 10**6, LIMIT, LEVEL) == ("ER bound +0.49 pt > +0.30",)
    assert futile(kd, 10**6, LIMIT, LEVEL, "topic=a") == ("val slice topic=a",)
    passes = PairedCounts(4350, 40, 60, 4350, 40, 80, 10, 50)
    assert candidate_test("kd", passes, LIMIT, LEVEL).passed and futile(passes, 0, LIMIT, LEVEL) == ()
    # counts pooled with a design effect are projected on their effective samples
    pooled = PairedCounts(8700, 100, 100, 8700, 80, 160, 20, 100, design_effect=2.0)
    assert futile(pooled, 1000, LIMIT, LEVEL) == futile(kd, 1000, LIMIT, LEVEL)
