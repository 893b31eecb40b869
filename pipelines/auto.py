"""What `method: auto` trains: no treatment (the ER every candidate is held to) and the treatments
of `method.candidates` that apply and fit `method.budget`, in their order (the order auto tests them
in). Each candidate is the spec's own method section with its name set, so a candidate trains
exactly as a spec naming that method would. No torch import: `congruent check` prints this list before anything runs.

Costs, in trainings of the new architecture: none, kd, fd-lm, bcwi, proximal 1 each (bcwi's is a
fine-tuning from the old weights, then its α sweep on val; proximal's a fine-tuning from them held
near them); elodi-legacy m + 1 (the replicas, then its student); elodi 1 more when elodi-legacy ran
(the replicas are shared), else m + 1. bcwi and proximal start from the old weights, so they apply
only where the architecture and the adapter are the old model's.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipelines.sections import MethodSpec
from workers.names import LADDER_FIELDS, PROXIMAL_WEIGHT, STARTS_FROM_OLD, ladder_rung

AUTO_ONLY_FIELDS = (
    "candidates",
    "budget",
    "max_er_increase",
    "cross_fit",
    "train_untested",
)  # MethodSpec fields only method auto reads
CROSS_FIT_CANDIDATES = (
    "none",
    "kd",
    "fd-lm",
    "bcwi",
    "proximal",
)  # one training each: cross-fitting trains them K more times
# cross_fit auto's J: the folds it trains of the K = 1/val_fraction (workers/data/folds.py), J more
# trainings per candidate, each as large as the shipped model's; 3 of 10 count about 3× the val split
CROSS_FIT_TRAINED = 3
CROSS_FIT_AUTO_SECONDS = 120.0  # cross_fit auto: on when no treatment's training took at most this
AUTO_LEGACY_WEIGHT = 0.8  # elodi-legacy's λ when the spec sets no legacy_weight (the demos' Eq. 9 weight)


@dataclass(frozen=True)
class AutoCandidate:
    """One candidate of `method: auto`: its name, the method section it trains with and what it adds
    to the trainings run."""

    name: str  # none, kd, fd-lm, bcwi, proximal, elodi-legacy, elodi, or a rung (kd_0.1)
    method: MethodSpec
    trainings: int


@dataclass(frozen=True)
class AutoChoice:
    """What auto will train (no treatment first) and what it leaves out, with why."""

    candidates: tuple[AutoCandidate, ...]
    skipped: tuple[tuple[str, str], ...]  # (candidate, why)
    stops: bool = True  # training stops at the first candidate that fails its test (not train_untested)

    @property
    def trainings(self) -> int:
        return sum(c.trainings for c in self.candidates)

    @property
    def replicas(self) -> bool:
        """Whether an elodi candidate trains the m replicas."""
        return any(c.name.startswith("elodi") for c in self.candidates)

    def lines(self) -> list[str]:
        """What `congruent check` prints: each candidate, its cost, and what is left out and why."""
        trained = ", ".join(f"{c.name} ({c.trainings})" for c in self.candidates)
        most = " at most: it stops at the first candidate that fails its test" if self.stops else ""
        lines = [f"auto trains {trained}: {self.trainings} trainings{most}"]
        lines += [f"auto leaves out {name}: {why}" for name, why in self.skipped]
        return lines


def candidate_method(method: MethodSpec, name: str) -> MethodSpec:
    """The method section candidate `name` trains with: the spec's own, its name set (elodi-legacy:
    elodi with λ = legacy_weight, else AUTO_LEGACY_WEIGHT; every other candidate without the legacy
    term; proximal_weight proximal's only; a rung NAME_VALUE: NAME with its LADDER_FIELDS field at
    VALUE). The auto-only fields keep their defaults, so two specs that differ only there share the
    candidates' checkpoints, and a rung's are those of a spec naming its method with that value."""
    base, value = ladder_rung(name)
    legacy = (method.legacy_weight or AUTO_LEGACY_WEIGHT) if base == "elodi-legacy" else None
    pull = method.proximal_weight if base == "proximal" else PROXIMAL_WEIGHT
    update: dict[str, object] = {"name": "elodi" if base.startswith("elodi") else base, "legacy_weight": legacy}
    update["proximal_weight"] = pull
    if value is not None:
        update[LADDER_FIELDS[base]] = value
    kept = {k: v for k, v in method.model_dump().items() if k not in AUTO_ONLY_FIELDS}
    return MethodSpec(**{**kept, **update})


def cross_fits(candidate: AutoCandidate) -> bool:
    """Whether cross-fitting trains `candidate` (its method trains once: CROSS_FIT_CANDIDATES)."""
    return candidate.method.name in CROSS_FIT_CANDIDATES and not candidate.name.startswith("elodi")


def auto_choice(method: MethodSpec, old_weights_fit: str | None = None) -> AutoChoice:
    """The candidates of an auto method section, in their order, while they fit its budget.
    `old_weights_fit`: None when the candidates that start from the old weights (bcwi, proximal)
    can (same architecture and adapter), else why not."""
    budget = method.budget
    chosen = [AutoCandidate("none", candidate_method(method, "none"), 1)]
    skipped: list[tuple[str, str]] = []
    used, replicas = 1, False
    for name in method.candidates:
        if ladder_rung(name)[0] in STARTS_FROM_OLD and old_weights_fit is not None:
            skipped.append((name, old_weights_fit))
            continue
        cost = 1 if not name.startswith("elodi") or replicas else method.m + 1
        if budget is not None and used + cost > budget:
            needs = f"{cost} training{'s' if cost > 1 else ''}"
            skipped.append((name, f"needs {needs}, budget {budget} leaves {budget - used}"))
            continue
        chosen.append(AutoCandidate(name, candidate_method(method, name), cost))
        used += cost
        replicas = replicas or name.startswith("elodi")
    return AutoChoice(tuple(chosen), tuple(skipped), stops=not method.train_untested)
