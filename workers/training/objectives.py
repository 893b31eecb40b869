"""Training objectives by method name: which loss a run minimises and which reference logits it needs.

Every objective has the form (1−α)·CE + α·D(student; references), α = `alpha`:

| method       | D                                   | references   |
|--------------|-------------------------------------|--------------|
| `none`       | — (α ignored: plain CE)             | —            |
| `kd`         | T²·KL toward the old model          | old          |
| `fd-kl`      | Focal Distillation, KL, T = 100     | old          |
| `fd-lm`      | Focal Distillation, logit matching  | old          |
| `dynamic-fd` | Dynamic FD (logit matching or KL)   | old          |
| `elodi`      | LDI toward the ensemble (+ legacy)  | teacher (+ old) |

`proximal` is CE plus a term on the weights, not on logits: CE + λ·½ Σ‖w − w_old‖², λ =
`proximal_weight` (`losses.proximal_penalty`); the trainer adds it (`Objective.pull`) with the
weights its student started from, the old model's (the plan's `init_from`, as BCWI's fine-tuning).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Literal

import torch

from workers.names import OBJECTIVES, PROXIMAL_WEIGHT
from workers.training import losses

DEFAULT_ALPHA = {"none": 0.0, "kd": 0.5, "fd-kl": 0.9, "fd-lm": 0.9, "dynamic-fd": 0.9, "elodi": 0.8, "proximal": 0.0}
NO_DISTILLATION = ("none", "proximal")  # objectives without a distillation term (α ignored)


@dataclass(frozen=True)
class Objective:
    """A method and its settings (keywords only, after the method). Call it with student logits,
    labels and reference logits: `Objective("elodi", alpha=0.8, k=10)(s, y, {"teacher": t})`."""

    method: str = "none"
    _: KW_ONLY
    alpha: float | None = None  # None: the method's default (DEFAULT_ALPHA)
    temperature: float | None = None  # KD: 4, FD-KL / dynamic-FD-KL: 100
    focal_alpha: float = 1.0
    focal_beta: float = 5.0
    distance: Literal["lm", "kl"] = "lm"  # dynamic-fd only
    k: int = 10
    p: float = 2.0
    margin: float = 0.0
    topk_by: losses.TopKBy = "teacher"
    legacy_weight: float | None = None
    ldi_reduction: losses.LdiReduction = "sum"  # LDI per sample: sum over K(x), or mean (the reference code)
    exclude_label: bool = False  # leave the true class out of LDI (the reference code does)
    proximal_weight: float = PROXIMAL_WEIGHT  # proximal: λ of its pull toward the old weights

    def __post_init__(self) -> None:
        if self.method not in OBJECTIVES:
            raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, got {self.method!r}")
        if not 0.0 <= self.weight <= 1.0:
            raise ValueError(f"alpha must lie in [0, 1], got {self.alpha}")
        if self.k < 1:
            raise ValueError(f"k must be ≥ 1, got {self.k}")
        if self.proximal_weight < 0:
            raise ValueError(f"proximal_weight must be ≥ 0, got {self.proximal_weight}")

    @property
    def weight(self) -> float:
        """α, the weight of the distillation term."""
        return DEFAULT_ALPHA[self.method] if self.alpha is None else self.alpha

    @property
    def references(self) -> tuple[str, ...]:
        """Names of the reference logits this objective needs: `old`, `teacher`."""
        if self.method in NO_DISTILLATION:
            return ()
        if self.method == "elodi":
            return ("teacher", "old") if self.legacy_weight is not None else ("teacher",)
        return ("old",)

    def __call__(self, student: torch.Tensor, labels: torch.Tensor, refs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """(1−α)·CE(s) + α·D(s; refs); plain CE for `none` and `proximal` (whose pull is on the
        weights: `pull`)."""
        ce = losses.cross_entropy(student, labels)
        if self.method in NO_DISTILLATION:
            return ce
        distill = self.distillation(student, labels, refs)
        return (1.0 - self.weight) * ce + self.weight * distill

    def with_perturbed(
        self, student: torch.Tensor, perturbed: torch.Tensor, labels: torch.Tensor, refs: Mapping[str, torch.Tensor]
    ) -> torch.Tensor:
        """(1−α)·CE(s) + α·½·[D(s; refs) + D(s′; refs)]: the distillation term on the batch and on a
        perturbed copy of it (`train.distill_inputs`), s′ the student's logits of the copy, the
        references' logits those of the batch itself (a teacher's view of the clean input, as in
        consistency training: its logits stay cached where they are)."""
        if self.method in NO_DISTILLATION:
            raise ValueError(f"method {self.method!r} has no distillation term to perturb")
        ce = losses.cross_entropy(student, labels)
        distill = 0.5 * (self.distillation(student, labels, refs) + self.distillation(perturbed, labels, refs))
        return (1.0 - self.weight) * ce + self.weight * distill

    @property
    def pulls(self) -> bool:
        """Whether the objective has a term on the weights (`proximal`): the trainer then keeps the
        weights its model starts from and adds `pull` to each step's loss."""
        return self.method == "proximal"

    def pull(self, params: Sequence[torch.Tensor], anchors: Sequence[torch.Tensor]) -> torch.Tensor:
        """λ·½ Σ_j ‖w_j − w_old,j‖² (`losses.proximal_penalty`), λ = `proximal_weight`; `anchors`
        the old weights, in the order of `params`."""
        return self.proximal_weight * losses.proximal_penalty(params, anchors)

    def distillation(
        self, student: torch.Tensor, labels: torch.Tensor, refs: Mapping[str, torch.Tensor]
    ) -> torch.Tensor:
        """D(student; refs): toward the old model (KD, FD-KL, FD-LM, dynamic FD) or ELODI's LDI
        toward the ensemble (and the old model with the legacy term); ValueError for `none`."""
        if self.method == "elodi":
            return losses.elodi_distillation(
                student,
                labels,
                refs["teacher"],
                self.k,
                self.p,
                self.margin,
                self.topk_by,
                old=refs.get("old"),
                legacy_weight=self.legacy_weight,
                reduction=self.ldi_reduction,
                exclude_label=self.exclude_label,
            )
        old = refs["old"]
        if self.method == "kd":
            return losses.knowledge_distillation(student, old, self.temperature or 4.0)
        if self.method == "fd-kl":
            return losses.fd_kl(student, old, labels, self.focal_alpha, self.focal_beta, self.temperature or 100.0)
        if self.method == "fd-lm":
            return losses.fd_lm(student, old, labels, self.focal_alpha, self.focal_beta)
        if self.method == "dynamic-fd":
            return losses.dynamic_fd(
                student, old, labels, self.focal_alpha, self.focal_beta, self.distance, self.temperature or 100.0
            )
        raise ValueError(f"objective {self.method!r} has no distillation term")
