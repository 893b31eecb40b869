"""Every loss against values computed by hand."""

import math

import pytest
import torch

from workers.training import losses
from workers.training.objectives import Objective

T = torch.tensor


def test_cross_entropy_uniform_logits_is_log_c():
    assert losses.cross_entropy(torch.zeros(3, 4), T([0, 1, 3])).item() == pytest.approx(math.log(4))


def test_kl_and_kd_by_hand():
    student, teacher = T([[0.0, 0.0]]), T([[math.log(3.0), 0.0]])
    # p_t = (3/4, 1/4), p_s = (1/2, 1/2): KL = 3/4·ln(3/2) + 1/4·ln(1/2)
    expected_t1 = 0.75 * math.log(1.5) + 0.25 * math.log(0.5)
    assert losses.kl_per_sample(student, teacher, 1.0).item() == pytest.approx(expected_t1)
    # T = 2: p_t = (√3, 1)/(√3 + 1); times T² = 4
    q = math.sqrt(3) / (math.sqrt(3) + 1)
    expected_t2 = 4 * (q * math.log(2 * q) + (1 - q) * math.log(2 * (1 - q)))
    assert losses.knowledge_distillation(student, teacher, 2.0).item() == pytest.approx(expected_t2)


def test_fd_lm_weights_old_correct_samples():
    student = T([[1.0, 0.0], [0.0, 0.0]])
    old = T([[0.0, -1.0], [2.0, 0.0]])  # old predicts 0, 0; labels 0, 1: correct, wrong
    labels = T([0, 1])
    assert losses.focal_weights(old, labels).tolist() == [6.0, 1.0]
    # ½‖s−o‖² = ½(1+1) = 1 and ½·4 = 2; weighted (6·1 + 1·2)/2 = 4
    assert losses.fd_lm(student, old, labels).item() == pytest.approx(4.0)
    assert losses.fd_lm(student, old, labels, alpha=1.0, beta=0.0).item() == pytest.approx(1.5)


def test_fd_kl_is_weighted_kl():
    student, old, labels = T([[0.0, 0.0], [0.0, 0.0]]), T([[2.0, 0.0], [2.0, 0.0]]), T([0, 1])
    kl = losses.kl_per_sample(student, old, 1.0)[0].item()
    assert losses.fd_kl(student, old, labels, temperature=1.0).item() == pytest.approx((6 * kl + 1 * kl) / 2)


def test_dynamic_fd_weights_follow_probability_of_the_label():
    labels = T([0, 0])
    old = T([[1.0, 0.0], [1.0, 0.0]])
    student = T([[0.0, 0.0], [3.0, 0.0]])  # p_new(0) = 0.5 < p_old(0) ≈ 0.73; then 0.95 > 0.73
    assert losses.dynamic_focal_weights(student, old, labels).tolist() == [6.0, 1.0]
    # lm distances: ½·1 = 0.5 and ½·4 = 2 → (6·0.5 + 1·2)/2 = 2.5
    assert losses.dynamic_fd(student, old, labels).item() == pytest.approx(2.5)


def test_ldi_selects_top_k_classes_per_sample_not_first_k_rows():
    teacher = T([[4.0, 3.0, 0.0, 0.0], [0.0, 0.0, 5.0, 1.0], [1.0, 2.0, 3.0, 9.0]])
    student = torch.zeros(3, 4)
    # top-2 classes of each row: {0,1}: 16+9; {2,3}: 25+1; {3,2}: 81+9 → mean 141/3.
    assert losses.logit_difference_inhibition(student, teacher, k=2).item() == pytest.approx(47.0)
    # The reference code's bug (first K rows of the batch, every class) gives (25 + 26)/2 = 25.5 or
    # (25 + 26)/3 = 17: neither is 47.
    mask = losses.topk_class_mask(student, teacher, 2)
    assert mask.tolist() == [[True, True, False, False], [False, False, True, True], [False, False, True, True]]


def test_ldi_margin_and_power():
    teacher = T([[4.0, 3.0, 0.0, 0.0], [0.0, 0.0, 5.0, 1.0], [1.0, 2.0, 3.0, 9.0]])
    # p = 1, margin 1: (3+2) + (4+0) + (8+2) = 19, mean 19/3
    value = losses.logit_difference_inhibition(torch.zeros(3, 4), teacher, k=2, p=1.0, margin=1.0)
    assert value.item() == pytest.approx(19 / 3)


def test_ldi_selection_by_teacher_student_union():
    student, teacher = T([[0.0, 0.0, 1.0, 2.0]]), T([[4.0, 3.0, 0.0, 0.0]])
    assert losses.logit_difference_inhibition(student, teacher, 2, by="teacher").item() == pytest.approx(25.0)
    assert losses.logit_difference_inhibition(student, teacher, 2, by="student").item() == pytest.approx(5.0)
    assert losses.logit_difference_inhibition(student, teacher, 2, by="union").item() == pytest.approx(30.0)
    assert losses.logit_difference_inhibition(student, teacher, 10).item() == pytest.approx(30.0)  # K ≥ C: all


def test_ldi_gradient_reaches_only_selected_classes():
    student = torch.zeros(1, 4, requires_grad=True)
    losses.logit_difference_inhibition(student, T([[4.0, 3.0, 0.0, 1.0]]), k=2).backward()
    assert student.grad.tolist() == [[-8.0, -6.0, 0.0, 0.0]]


def test_elodi_total_and_legacy_term():
    student, labels = torch.zeros(1, 4), T([0])
    ensemble, old = T([[4.0, 3.0, 0.0, 0.0]]), T([[0.0, 0.0, 2.0, 1.0]])
    ce = math.log(4)
    assert losses.elodi(student, labels, ensemble, alpha=0.8, k=2).item() == pytest.approx(0.2 * ce + 0.8 * 25)
    # Eq. 9: λ·LDI(ens) + (1−λ)·LDI(old); LDI(old) over old's top-2 {2, 3} = 4 + 1 = 5
    value = losses.elodi(student, labels, ensemble, alpha=0.8, k=2, old=old, legacy_weight=0.25)
    assert value.item() == pytest.approx(0.2 * ce + 0.8 * (0.25 * 25 + 0.75 * 5))
    with pytest.raises(ValueError, match="old model"):
        losses.elodi(student, labels, ensemble, legacy_weight=0.5)


def test_objectives_compose_ce_and_distillation():
    student, labels = T([[1.0, 0.0], [0.0, 0.0]]), T([0, 1])
    old = T([[0.0, -1.0], [2.0, 0.0]])
    ce = losses.cross_entropy(student, labels).item()
    fd = Objective("fd-lm", alpha=0.9)
    assert fd.references == ("old",)
    assert fd(student, labels, {"old": old}).item() == pytest.approx(0.1 * ce + 0.9 * 4.0)
    assert Objective("none")(student, labels, {}).item() == pytest.approx(ce)
    assert Objective("elodi", legacy_weight=0.5).references == ("teacher", "old")
    with pytest.raises(ValueError, match="alpha"):
        Objective("kd", alpha=1.5)
    with pytest.raises(ValueError, match="objective must be one of"):
        Objective("magic")


def test_ldi_from_top_k_teacher_logits_equals_dense_ldi():
    generator = torch.Generator().manual_seed(0)
    student, teacher = torch.randn(6, 10, generator=generator), torch.randn(6, 10, generator=generator)
    compact = losses.TopKLogits.of(teacher, 3)
    assert compact.values.shape == (6, 3) and compact.indices.dtype == torch.int32
    dense = losses.logit_difference_inhibition(student, teacher, k=3)
    assert losses.ldi_topk(student, compact).item() == pytest.approx(dense.item())
    labels = torch.arange(6) % 10
    assert losses.elodi(student, labels, compact, k=3).item() == pytest.approx(
        losses.elodi(student, labels, teacher, k=3).item()
    )
    with pytest.raises(ValueError, match="selection by the teacher"):
        losses.elodi(student, labels, compact, k=3, by="union")


def test_ldi_reduction_and_the_excluded_true_class_by_hand():
    student, teacher = torch.tensor([[1.0, 2.0, 3.0]]), torch.tensor([[3.0, 2.0, 1.0]])
    # K = 2 by the teacher: classes 0 and 1; squared gaps 4 and 0; class 2 is not selected
    assert losses.logit_difference_inhibition(student, teacher, k=2).item() == 4.0
    assert losses.logit_difference_inhibition(student, teacher, k=2, reduction="mean").item() == 2.0
    label0, label2 = torch.tensor([0]), torch.tensor([2])
    assert losses.logit_difference_inhibition(student, teacher, k=2, labels=label0).item() == 0.0
    assert losses.logit_difference_inhibition(student, teacher, k=2, labels=label2).item() == 4.0
    # K = C, the reference code's loss: the mean over all C classes with the true class zeroed
    all_classes = losses.logit_difference_inhibition(student, teacher, k=3, reduction="mean", labels=label2)
    assert all_classes.item() == pytest.approx((4.0 + 0.0) / 3)
    top = losses.TopKLogits.of(teacher, 2)
    for reduction in ("sum", "mean"):
        for labels in (None, label0, label2):
            dense = losses.logit_difference_inhibition(student, teacher, 2, reduction=reduction, labels=labels)
            assert losses.ldi_topk(student, top, reduction=reduction, labels=labels).item() == dense.item()
    with pytest.raises(ValueError, match="sum or mean"):
        losses.logit_difference_inhibition(student, teacher, reduction="median")


def test_elodi_objective_passes_its_ldi_choices():
    student, teacher, labels = torch.tensor([[1.0, 2.0, 3.0]]), torch.tensor([[3.0, 2.0, 1.0]]), torch.tensor([0])
    ce = losses.cross_entropy(student, labels).item()
    plain = Objective("elodi", alpha=0.5, k=2)(student, labels, {"teacher": teacher}).item()
    mean = Objective("elodi", alpha=0.5, k=2, ldi_reduction="mean")(student, labels, {"teacher": teacher}).item()
    excluded = Objective("elodi", alpha=0.5, k=2, exclude_label=True)(student, labels, {"teacher": teacher}).item()
    assert plain == pytest.approx(0.5 * ce + 0.5 * 4.0) and mean == pytest.approx(0.5 * ce + 0.5 * 2.0)
    assert excluded == pytest.approx(0.5 * ce)


def test_an_objective_name_outside_the_known_ones_raises_instead_of_training_something_else():
    from workers.names import OBJECTIVES
    from workers.training.objectives import DEFAULT_ALPHA, Objective

    assert set(DEFAULT_ALPHA) == set(OBJECTIVES)  # each objective the spec may name has its default α
    with pytest.raises(ValueError, match="objective must be one of"):
        Objective("focal")
    student, labels = torch.randn(4, 10, generator=torch.Generator().manual_seed(0)), torch.tensor([0, 1, 2, 3])
    refs = {"old": torch.randn(4, 10), "teacher": torch.randn(4, 10)}
    for name in OBJECTIVES:
        assert torch.isfinite(Objective(name)(student, labels, refs))
    unknown = Objective("fd-lm")
    object.__setattr__(unknown, "method", "focal")  # past the constructor's check
    with pytest.raises(ValueError, match="'focal'"):
        unknown(student, labels, refs)
