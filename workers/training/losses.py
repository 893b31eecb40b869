"""Losses for positive-congruent training. Each is a small pure function: tensors in, scalar out.

Shapes: logits B×C (student/new `s`, teacher `t`, old model `o`), labels B (int64).
Every loss is a mean over the batch unless its docstring says otherwise.

Example::

    loss = (1 - a) * cross_entropy(s, y) + a * fd_lm(s, o, y, alpha=1.0, beta=5.0)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, NamedTuple

import torch
import torch.nn.functional as F

TopKBy = Literal["teacher", "student", "union"]
LdiReduction = Literal["sum", "mean"]


def cross_entropy(student: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """CE = −(1/|L|) Σ_{i ∈ L} log softmax(s_i)[ℓ_i], L the labelled samples (ℓ_i ≥ 0: an unlabelled
    text, ℓ_i = −1, has no CE term); 0 for a batch with none."""
    per_sample = F.cross_entropy(student, labels.clamp(min=0), reduction="none")
    labelled = (labels >= 0).to(per_sample.dtype)
    return (per_sample * labelled).sum() / labelled.sum().clamp(min=1.0)


def kl_per_sample(student: torch.Tensor, teacher: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """T² · KL(softmax(t/T) ‖ softmax(s/T)) for each sample: a vector of length B."""
    log_p_teacher = F.log_softmax(teacher / temperature, dim=1)
    log_p_student = F.log_softmax(student / temperature, dim=1)
    kl = (log_p_teacher.exp() * (log_p_teacher - log_p_student)).sum(dim=1)
    return temperature**2 * kl


def logit_matching_per_sample(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """½ ‖s − t‖² for each sample: a vector of length B."""
    return 0.5 * (student - teacher).pow(2).sum(dim=1)


def knowledge_distillation(student: torch.Tensor, teacher: torch.Tensor, temperature: float = 4.0) -> torch.Tensor:
    """KD (Hinton et al.): (1/B) Σ_i T² · KL(softmax(t_i/T) ‖ softmax(s_i/T))."""
    return kl_per_sample(student, teacher, temperature).mean()


def focal_weights(old: torch.Tensor, labels: torch.Tensor, alpha: float = 1.0, beta: float = 5.0) -> torch.Tensor:
    """Focal Distillation weights w_i = α + β · 1[argmax o_i = ℓ_i] (Yan et al. 2021, Eq. 5)."""
    return alpha + beta * (old.argmax(dim=1) == labels).to(old.dtype)


def dynamic_focal_weights(
    student: torch.Tensor, old: torch.Tensor, labels: torch.Tensor, alpha: float = 1.0, beta: float = 5.0
) -> torch.Tensor:
    """Dynamic FD weights w_i = α + β · 1[p_old(ℓ_i|x_i) > p_new(ℓ_i|x_i)], re-evaluated every step
    (Xie et al. 2021); the indicator carries no gradient."""
    p_old = F.softmax(old, dim=1).gather(1, labels[:, None]).squeeze(1)
    p_new = F.softmax(student.detach(), dim=1).gather(1, labels[:, None]).squeeze(1)
    return alpha + beta * (p_old > p_new).to(student.dtype)


def fd_kl(
    student: torch.Tensor,
    old: torch.Tensor,
    labels: torch.Tensor,
    alpha: float = 1.0,
    beta: float = 5.0,
    temperature: float = 100.0,
) -> torch.Tensor:
    """FD-KL: (1/B) Σ_i w_i · T² · KL(softmax(o_i/T) ‖ softmax(s_i/T)), w_i = α + β·1[old correct]."""
    return (focal_weights(old, labels, alpha, beta) * kl_per_sample(student, old, temperature)).mean()


def fd_lm(
    student: torch.Tensor, old: torch.Tensor, labels: torch.Tensor, alpha: float = 1.0, beta: float = 5.0
) -> torch.Tensor:
    """FD-LM: (1/B) Σ_i w_i · ½ ‖s_i − o_i‖², w_i = α + β·1[old correct]."""
    return (focal_weights(old, labels, alpha, beta) * logit_matching_per_sample(student, old)).mean()


def dynamic_fd(
    student: torch.Tensor,
    old: torch.Tensor,
    labels: torch.Tensor,
    alpha: float = 1.0,
    beta: float = 5.0,
    distance: Literal["lm", "kl"] = "lm",
    temperature: float = 100.0,
) -> torch.Tensor:
    """Dynamic FD: (1/B) Σ_i w_i · d(s_i, o_i), w_i = α + β·1[p_old(ℓ|x) > p_new(ℓ|x)],
    d = ½‖s − o‖² (`lm`) or T²·KL (`kl`)."""
    weights = dynamic_focal_weights(student, old, labels, alpha, beta)
    if distance == "lm":
        per_sample = logit_matching_per_sample(student, old)
    elif distance == "kl":
        per_sample = kl_per_sample(student, old, temperature)
    else:
        raise ValueError(f"distance must be 'lm' or 'kl', got {distance!r}")
    return (weights * per_sample).mean()


def topk_class_mask(student: torch.Tensor, teacher: torch.Tensor, k: int, by: TopKBy = "teacher") -> torch.Tensor:
    """Boolean B×C mask of the classes K(x) of each sample (ELODI Eq. 5): the K largest teacher
    logits of that sample (`teacher`), of the student (`student`), or their union. K ≥ C: all."""
    if k < 1:
        raise ValueError(f"k must be ≥ 1, got {k}")
    num_classes = teacher.shape[1]
    if k >= num_classes:
        return torch.ones_like(teacher, dtype=torch.bool)

    def top(logits: torch.Tensor) -> torch.Tensor:
        mask = torch.zeros_like(logits, dtype=torch.bool)
        return mask.scatter_(1, logits.detach().topk(k, dim=1).indices, True)

    if by == "teacher":
        return top(teacher)
    if by == "student":
        return top(student)
    if by == "union":
        return top(teacher) | top(student)
    raise ValueError(f"topk_by must be teacher, student or union, got {by!r}")


def _reduce_ldi(terms: torch.Tensor, selected: torch.Tensor, reduction: LdiReduction) -> torch.Tensor:
    """Batch mean of Σ_k terms (sum) or of Σ_k terms / |K(x)| (mean over the selected classes)."""
    per_sample = terms.sum(dim=1)
    if reduction == "mean":
        per_sample = per_sample / selected.sum(dim=1).clamp(min=1)
    elif reduction != "sum":
        raise ValueError(f"reduction must be sum or mean, got {reduction!r}")
    return per_sample.mean()


def logit_difference_inhibition(
    student: torch.Tensor,
    teacher: torch.Tensor,
    k: int = 10,
    p: float = 2.0,
    margin: float = 0.0,
    by: TopKBy = "teacher",
    reduction: LdiReduction = "sum",
    labels: torch.Tensor | None = None,
) -> torch.Tensor:
    """LDI (ELODI Eq. 8): (1/B) Σ_i r_i Σ_{k ∈ K(x_i), k ≠ ℓ_i} max(|s_ik − t_ik| − margin, 0)^p, with
    K(x_i) chosen per sample by :func:`topk_class_mask`; r_i = 1 (`sum`, the paper's equation) or
    1/|K(x_i)| (`mean`, the reference code's); the true class ℓ_i is left out only when `labels` is
    given (the reference code zeroes that term)."""
    mask = topk_class_mask(student, teacher, k, by)
    gap = ((student - teacher).abs() - margin).clamp(min=0).pow(p)
    terms = gap * mask
    if labels is not None:  # (an unlabelled sample, ℓ_i = −1, keeps every term)
        true_class = F.one_hot(labels.clamp(min=0), terms.shape[1]).bool() & (labels >= 0)[:, None]
        terms = terms.masked_fill(true_class, 0.0)
    return _reduce_ldi(terms, mask, reduction)


class TopKLogits(NamedTuple):
    """Only the K largest teacher logits of each sample and their class indices (B×K each): what a
    teacher pool sends when LDI selects classes by the teacher (8K bytes a sample instead of 4C)."""

    values: torch.Tensor
    indices: torch.Tensor

    @staticmethod
    def of(logits: torch.Tensor, k: int) -> TopKLogits:
        top = logits.topk(min(k, logits.shape[1]), dim=1)
        return TopKLogits(top.values, top.indices.to(torch.int32))

    def to(self, device: torch.device | str) -> TopKLogits:
        return TopKLogits(self.values.to(device), self.indices.to(device))


def ldi_topk(
    student: torch.Tensor,
    teacher: TopKLogits,
    p: float = 2.0,
    margin: float = 0.0,
    reduction: LdiReduction = "sum",
    labels: torch.Tensor | None = None,
) -> torch.Tensor:
    """LDI with K(x) = the teacher's top-K classes, given only those logits:
    (1/B) Σ_i r_i Σ_j max(|s_i[c_ij] − v_ij| − margin, 0)^p, (v, c) = teacher values and indices;
    r_i and the true class as in :func:`logit_difference_inhibition`."""
    indices = teacher.indices.long()
    terms = ((student.gather(1, indices) - teacher.values).abs() - margin).clamp(min=0).pow(p)
    if labels is not None:
        terms = terms.masked_fill(indices == labels[:, None], 0.0)
    return _reduce_ldi(terms, torch.ones_like(terms, dtype=torch.bool), reduction)


def elodi_distillation(
    student: torch.Tensor,
    labels: torch.Tensor,
    ensemble: torch.Tensor | TopKLogits,
    k: int = 10,
    p: float = 2.0,
    margin: float = 0.0,
    by: TopKBy = "teacher",
    old: torch.Tensor | None = None,
    legacy_weight: float | None = None,
    reduction: LdiReduction = "sum",
    exclude_label: bool = False,
) -> torch.Tensor:
    """ELODI's distillation term: LDI(s; ens), or with a legacy old model (ELODI Eq. 9)
    λ·LDI(s; ens) + (1−λ)·LDI(s; old), λ = `legacy_weight`. `ensemble` may come as
    :class:`TopKLogits` (selection by the teacher only); `reduction` and `exclude_label` shape every
    LDI term (see :func:`logit_difference_inhibition`)."""
    true_class = labels if exclude_label else None
    if isinstance(ensemble, TopKLogits):
        if by != "teacher":
            raise ValueError("top-K teacher logits only serve selection by the teacher")
        distill = ldi_topk(student, ensemble, p, margin, reduction, true_class)
    else:
        distill = logit_difference_inhibition(student, ensemble, k, p, margin, by, reduction, true_class)
    if legacy_weight is not None:
        if old is None:
            raise ValueError("legacy_weight needs the old model's logits")
        if not 0.0 <= legacy_weight <= 1.0:
            raise ValueError(f"legacy_weight must lie in [0, 1], got {legacy_weight}")
        legacy = logit_difference_inhibition(student, old, k, p, margin, by, reduction, true_class)
        distill = legacy_weight * distill + (1.0 - legacy_weight) * legacy
    return distill


def elodi(
    student: torch.Tensor,
    labels: torch.Tensor,
    ensemble: torch.Tensor | TopKLogits,
    alpha: float = 0.8,
    **distillation: Any,
) -> torch.Tensor:
    """ELODI: (1−α)·CE + α·D, D = `elodi_distillation(student, labels, ensemble, **distillation)`
    (LDI toward the ensemble, and the old model with `legacy_weight`)."""
    distill = elodi_distillation(student, labels, ensemble, **distillation)
    return (1.0 - alpha) * cross_entropy(student, labels) + alpha * distill


def proximal_penalty(params: Sequence[torch.Tensor], anchors: Sequence[torch.Tensor]) -> torch.Tensor:
    """The proximal pull toward the old weights (Kuzborskij & Orabona 2013, "Stability and Hypothesis
    Transfer Learning", ICML; L2-SP, Li, Grandvalet & Davoine 2018, ICML): ½ Σ_j ‖w_j − w_old,j‖²,
    summed over every entry of every parameter (not a mean), each w_j paired with its anchor w_old,j
    by position. A parameter whose shape differs from its anchor's (a classifier head grown by new
    classes: C′×d against C×d) is pulled on the entries both have, its leading C×d block; the rows
    the old model never had are free. One whose number of dimensions differs shares no entry and is
    left out. The objective multiplies it by λ: CE + λ · ½ Σ_j ‖w_j − w_old,j‖². The anchors carry
    no gradient."""
    if len(params) != len(anchors):
        raise ValueError(f"{len(params)} parameters against {len(anchors)} anchors")
    total = torch.zeros((), device=params[0].device if params else None)
    for w, anchor in zip(params, anchors, strict=True):
        if w.dim() != anchor.dim():
            continue
        shared = tuple(slice(0, min(a, b)) for a, b in zip(w.shape, anchor.shape, strict=True))
        total = total + (w[shared].float() - anchor[shared].detach().float()).pow(2).sum()
    return 0.5 * total
