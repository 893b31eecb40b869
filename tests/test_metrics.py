"""Tests of workers.metrics: hand-computed cases and brute-force property checks."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workers import metrics

# Five samples, worked out by hand:
#   labels  0 1 2 1 0
#   old     0 1 1 1 2   correct: ✓ ✓ ✗ ✓ ✗   ER_old = 2/5
#   new     0 2 2 1 0   correct: ✓ ✗ ✓ ✓ ✓   ER_new = 1/5
#   negative flip (old ✓, new ✗): sample 1            NFR = 1/5
#   positive flips (old ✗, new ✓): samples 2 and 4    PFR = 2/5
#   Rel-NFR = (1/5) / ((1 − 2/5) · 1/5) = 5/3
LABELS = np.array([0, 1, 2, 1, 0])
OLD = np.array([0, 1, 1, 1, 2])
NEW = np.array([0, 2, 2, 1, 0])
NEW_LOGITS = np.array([[2.0, 0.0, 1.0], [0.0, 1.0, 3.0], [0.5, 0.1, 0.9], [0.0, 5.0, 1.0], [3.0, 1.0, 1.0]])


def test_hand_computed_rates():
    assert metrics.error_rate(OLD, LABELS) == pytest.approx(0.4)
    assert metrics.error_rate(NEW, LABELS) == pytest.approx(0.2)
    assert metrics.negative_flip_rate(OLD, NEW, LABELS) == pytest.approx(0.2)
    assert metrics.positive_flip_rate(OLD, NEW, LABELS) == pytest.approx(0.4)
    assert metrics.relative_nfr(0.2, 0.4, 0.2) == pytest.approx(5 / 3)


def test_update_report_is_plain_json():
    report = metrics.update_report(OLD, NEW, LABELS)
    assert report == pytest.approx({"n": 5, "er_old": 0.4, "er_new": 0.2, "nfr": 0.2, "pfr": 0.4, "rel_nfr": 5 / 3})
    assert all(type(value) in (int, float) for value in report.values())


def test_hand_computed_nfr_matrix():
    # third version: 1 1 2 0 0 -> correct ✗ ✓ ✓ ✗ ✓
    third = np.array([1, 1, 2, 0, 0])
    expected = [[0.0, 0.2, 0.4], [0.4, 0.0, 0.4], [0.4, 0.2, 0.0]]
    np.testing.assert_allclose(metrics.nfr_matrix([OLD, NEW, third], LABELS), expected)


@pytest.mark.parametrize(
    ("er_old", "er_new"), [(1.0, 0.3), (0.2, 0.0), (1.0, 0.0)], ids=["er_old=1", "er_new=0", "both"]
)
def test_relative_nfr_undefined(er_old, er_new):
    assert metrics.relative_nfr(0.0, er_old, er_new) is None


def test_class_ids_tie_goes_to_lowest_index():
    logits = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0], [0.0, -1.0, 0.0]])
    np.testing.assert_array_equal(metrics.class_ids(logits), [1, 0, 0])


def test_class_ids_returns_int64_ids_unchanged():
    ids = metrics.class_ids(np.array([3, 0, 2], dtype=np.int8))
    assert ids.dtype == np.int64
    np.testing.assert_array_equal(ids, [3, 0, 2])


def test_logits_and_ids_give_the_same_answers():
    assert metrics.class_ids(NEW_LOGITS).tolist() == NEW.tolist()
    assert metrics.update_report(OLD, NEW_LOGITS, LABELS) == metrics.update_report(OLD, NEW, LABELS)
    np.testing.assert_array_equal(metrics.nfr_matrix([OLD, NEW_LOGITS], LABELS), metrics.nfr_matrix([OLD, NEW], LABELS))


def test_torch_tensors_are_accepted():
    torch = pytest.importorskip("torch")
    report = metrics.update_report(
        torch.tensor(OLD), torch.tensor(NEW_LOGITS, requires_grad=True), torch.tensor(LABELS)
    )
    assert report == metrics.update_report(OLD, NEW, LABELS)


@pytest.mark.parametrize(
    "bad",
    [
        np.array([0.0, 1.0]),
        np.array([True, False]),
        np.array(["a", "b"]),
        np.zeros((2, 2, 2)),
        np.zeros((2, 3), dtype=np.int64),
        np.zeros((2, 0)),
        np.array([[0.0, np.nan]]),
        np.int64(3),
    ],
    ids=["float-1d", "bool", "str", "3d", "int-2d", "no-classes", "nan-logits", "scalar"],
)
def test_class_ids_rejects_other_inputs(bad):
    with pytest.raises(ValueError):
        metrics.class_ids(bad)


@pytest.mark.parametrize(
    "call",
    [
        lambda: metrics.error_rate(OLD[:4], LABELS),
        lambda: metrics.negative_flip_rate(OLD, NEW[:3], LABELS),
        lambda: metrics.positive_flip_rate(OLD[:2], NEW, LABELS),
        lambda: metrics.nfr_matrix([OLD, NEW[1:]], LABELS),
        lambda: metrics.update_report(OLD, NEW, LABELS[:4]),
    ],
)
def test_mismatched_lengths_raise(call):
    with pytest.raises(ValueError, match="samples"):
        call()


@pytest.mark.parametrize(
    "call",
    [
        lambda empty: metrics.error_rate(empty, empty),
        lambda empty: metrics.negative_flip_rate(empty, empty, empty),
        lambda empty: metrics.positive_flip_rate(empty, empty, empty),
        lambda empty: metrics.nfr_matrix([empty, empty], empty),
        lambda empty: metrics.update_report(empty, empty, empty),
    ],
)
def test_empty_set_raises(call):
    with pytest.raises(ValueError, match="empty"):
        call(np.array([], dtype=np.int64))


def test_nfr_counts_globally_not_per_batch():
    # Half A (2 samples): both flip from correct to wrong -> NFR_A = 1.
    # Half B (8 samples): no flips                      -> NFR_B = 0.
    # Mean of halves = 0.5, but the global NFR = 2/10 = 0.2.
    labels_a, old_a, new_a = np.zeros(2, int), np.zeros(2, int), np.ones(2, int)
    labels_b = old_b = new_b = np.zeros(8, int)
    per_half = [
        metrics.negative_flip_rate(old_a, new_a, labels_a),
        metrics.negative_flip_rate(old_b, new_b, labels_b),
    ]
    assert np.mean(per_half) == pytest.approx(0.5)
    whole = metrics.negative_flip_rate(
        np.concatenate([old_a, old_b]),
        np.concatenate([new_a, new_b]),
        np.concatenate([labels_a, labels_b]),
    )
    assert whole == pytest.approx(0.2)


@st.composite
def labelled_versions(draw, min_versions=2, max_versions=5):
    """Labels and several prediction vectors over N ∈ [1, 30] samples and ≤ 4 classes."""
    n = draw(st.integers(1, 30))
    classes = draw(st.integers(1, 4))
    ids = st.lists(st.integers(0, classes - 1), min_size=n, max_size=n)
    labels = draw(ids)
    versions = draw(st.lists(ids, min_size=min_versions, max_size=max_versions))
    return labels, versions


def brute_force_rates(old, new, labels):
    """ER_old, ER_new, NFR, PFR by plain Python loops."""
    n = len(labels)
    er_old = sum(o != y for o, y in zip(old, labels)) / n
    er_new = sum(p != y for p, y in zip(new, labels)) / n
    nfr = sum(o == y and p != y for o, p, y in zip(old, new, labels)) / n
    pfr = sum(o != y and p == y for o, p, y in zip(old, new, labels)) / n
    return er_old, er_new, nfr, pfr


@settings(max_examples=50, deadline=None)
@given(labelled_versions(max_versions=2))
def test_rates_match_brute_force(case):
    labels, (old, new) = case
    er_old, er_new, nfr, pfr = brute_force_rates(old, new, labels)
    arrays = [np.array(values) for values in (old, new, labels)]
    assert metrics.error_rate(arrays[0], arrays[2]) == pytest.approx(er_old)
    assert metrics.error_rate(arrays[1], arrays[2]) == pytest.approx(er_new)
    assert metrics.negative_flip_rate(*arrays) == pytest.approx(nfr)
    assert metrics.positive_flip_rate(*arrays) == pytest.approx(pfr)
    denominator = (1 - er_old) * er_new
    expected_rel = None if denominator == 0 else nfr / denominator
    assert metrics.update_report(*arrays)["rel_nfr"] == pytest.approx(expected_rel)


@settings(max_examples=50, deadline=None)
@given(labelled_versions(min_versions=1))
def test_nfr_matrix_matches_brute_force(case):
    labels, versions = case
    expected = [[brute_force_rates(old, new, labels)[2] for new in versions] for old in versions]
    matrix = metrics.nfr_matrix([np.array(v) for v in versions], np.array(labels))
    np.testing.assert_allclose(matrix, expected)
    assert np.all(np.diag(matrix) == 0)


def test_nfr_matrix_counts_are_exact_beyond_one_block():
    # 3 blocks of samples; version 0 always correct, version 1 wrong on every 7th sample.
    n = 3 * metrics._EXACT_FLOAT32_BLOCK + 5
    labels = np.zeros(n, dtype=np.int64)
    wrong = np.zeros(n, dtype=np.int64)
    wrong[::7] = 1
    matrix = metrics.nfr_matrix([labels, wrong], labels)
    assert matrix[0, 1] == len(range(0, n, 7)) / n
    assert matrix[1, 0] == 0.0


def test_negative_flips_and_per_class_nfr_hand_computed():
    from workers.metrics import negative_flips, per_class_nfr

    labels = [0, 0, 1, 1, 1, 2]
    old = [0, 0, 1, 1, 0, 2]  # correct on 0, 1, 2, 3, 5
    new = [1, 0, 1, 2, 1, 0]  # wrong on 0, 3, 5 (4 is a positive flip)
    assert negative_flips(old, new, labels).tolist() == [0, 3, 5]
    nfr_by_class = per_class_nfr(old, new, labels, 4)
    assert nfr_by_class[:3].tolist() == [1 / 2, 1 / 3, 1.0]
    assert np.isnan(nfr_by_class[3])  # class 3 has no samples
    # weighted by class counts, the per-class rates give back the global NFR
    assert abs((1 / 2 * 2 + 1 / 3 * 3 + 1.0 * 1) / 6 - metrics.negative_flip_rate(old, new, labels)) < 1e-12


def test_nfr_matrix_rows_count_only_their_scope():
    """Row i counts the samples in version i's scope (data growth: the classes it was trained on)."""
    labels = np.array([0, 0, 1, 1, 2, 2])
    v0 = np.array([0, 0, 1, 1, 0, 0])  # knows classes 0 and 1; right on all of them
    v1 = np.array([0, 1, 1, 0, 2, 2])  # flips samples 1 and 3 of v0
    scopes = [np.isin(labels, [0, 1]), np.ones(6, bool)]
    matrix = metrics.nfr_matrix([v0, v1], labels, scopes)
    assert matrix[0, 1] == pytest.approx(2 / 4)  # 2 flips among v0's 4 in-scope samples, not 2 / 6
    assert matrix[1, 0] == pytest.approx(2 / 6)  # v1 right on samples 4 and 5, v0 wrong there
    assert np.allclose(metrics.nfr_matrix([v0, v1], labels), [[0, 2 / 6], [2 / 6, 0]])
    with pytest.raises(ValueError, match="masks"):
        metrics.nfr_matrix([v0, v1], labels, scopes[:1])
