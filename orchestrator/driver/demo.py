"""The demo: a real model update on Fashion-MNIST through the pipeline, in minutes.

Three update pipelines on an embedded local Ray, registered as versions of one model:

    v1        a small MLP (784-128) trained on half of the images, 10 epochs — the deployed "old" model
    v2-none   the new architecture (784-512-512 MLP) on all of them, 20 epochs, trained without treatment
    v2-elodi  the same with ELODI on a legacy old model (Eq. 9): m replicas in parallel, distilled
              online into one with LDI toward their ensemble (weight λ = 0.8) and toward v1 (1 − λ)

The configuration came from a search on 2 CPU cores (docs/benchmarks.md, "The demo"):
with a plain v1, ELODI's distillation from the new replicas alone removes few flips at this scale
(the MLPs' flips are systematic: plain seeds agree on 97.5 % of the images), while Eq. 9's term
toward v1 brings NFR to about 0.8× no treatment's at ≤ 0.3 pt of ER on most seeds. The verdict is
computed every run: the plain v2 trainings (v2-none and the m replicas, each its own seed) give
the no-treatment NFR's spread.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from orchestrator.driver.pipeline import run_pipeline
from orchestrator.driver.publish import PipelineResult
from orchestrator.execution.watch import StageWatch
from orchestrator.planning.preflight import preflight
from pipelines.spec import parse_spec


@dataclass(frozen=True)
class DemoSettings:
    out: Path
    model: str = "congruent-demo"
    epochs: int = 20  # v2's trainings; v1 trains half as many
    m: int = 4
    seed: int = 0
    train_limit: int | None = None
    eval_limit: int | None = None
    legacy_weight: float = 0.8  # λ of Eq. 9: 1 − λ of the LDI pulls toward v1
    gpus: float = 0.0  # > 0: replicas share the GPU(s) in fractions, the student holds one with its teachers
    text: bool = False  # the text demo: tweets, text-bag → TEXT_ARCH, ELODI with the legacy term too


def _resources(settings: DemoSettings) -> dict[str, Any]:
    if settings.gpus > 0:
        return {
            "replica": {"cpus": 1, "gpus": settings.gpus / 2},
            "student": {"cpus": 1, "gpus": settings.gpus},
            "teacher_actors": 0,
        }
    return {"replica": {"cpus": 1}, "student": {"cpus": 1}, "teacher": {"cpus": 0.5}, "teacher_actors": 2}


def demo_specs(settings: DemoSettings, old: str = "v1") -> list[dict[str, Any]]:
    """The three spec documents; v2's `old` is v1's registered version (`run_demo` fills it in)."""
    if settings.text:
        return text_demo_specs(settings, old)
    resources = _resources(settings)
    common: dict[str, Any] = {
        "model": settings.model,
        "data": {"dataset": "fashion-mnist", "train_limit": settings.train_limit, "eval_limit": settings.eval_limit},
        # the MLPs' own recipes aside (pipelines/defaults.py): SGD at lr 0.05 is what the legacy term was tuned with
        "train": {
            "epochs": settings.epochs,
            "batch_size": 128,
            "optimizer": "sgd",
            "lr": 0.05,
            "weight_decay": 5e-4,
            "seed": settings.seed,
            "augment": False,
        },
        "resources": resources,
        "storage": str(settings.out / "runs"),
    }
    v1_data = {**common["data"], "subset": "half-samples"}  # the old version saw half of the images
    v1_train = {**common["train"], "epochs": max(1, settings.epochs // 2)}
    return [
        {
            **common,
            "version": "v1",
            "arch": "mlp-small",
            "data": v1_data,
            "train": v1_train,
            "method": {"name": "none"},
        },
        {**common, "version": "v2-none", "arch": "mlp", "method": {"name": "none"}, "old": old},
        {
            **common,
            "version": "v2-elodi",
            "arch": "mlp",
            "old": old,
            "method": {
                "name": "elodi",
                "m": settings.m,
                "alpha": 0.8,
                "k": 10,
                "topk_by": "teacher",
                "legacy_weight": settings.legacy_weight,
            },
        },
    ]


TEXT_ARCH = "text-bag"  # v1 and v2 of the text demo (a text-cnn was neither more accurate nor helped here)
TEXT_EPOCHS = 5  # v1's and v2's plain trainings in the text demo (text-bag's own); the student distils 3× as long
# text-bag's rate on the tweets: its default (8) was chosen across three text sets, where longer texts
# need it; on tweets alone lr 1 was best (validation ER 22.85 % against 24.02 %, docs/benchmarks.md)
TEXT_LR = 1.0


def text_demo_specs(settings: DemoSettings, old: str = "v1") -> list[dict[str, Any]]:
    """The text demo (`congruent demo --text`): v1 a text-bag on half of the tweets, then v2 on all of
    them without treatment and with ELODI with the legacy term toward v1 (λ `legacy_weight`), each version with its own
    tokenizer. ELODI (α 0.9, K = all 3 classes) distils for 3× the plain trainings' epochs
    (`train.student_epochs`): a plain text-bag trained that long flips more, not less. Every other
    training setting but the rate (`TEXT_LR`) is text-bag's default (pipelines/defaults.py)."""
    common: dict[str, Any] = {
        "model": settings.model,
        "data": {"dataset": "tweet-sentiment", "train_limit": settings.train_limit, "eval_limit": settings.eval_limit},
        "train": {"epochs": settings.epochs, "lr": TEXT_LR, "seed": settings.seed},  # else text-bag's defaults
        "resources": _resources(settings),
        "storage": str(settings.out / "runs"),
    }
    elodi = {"name": "elodi", "m": settings.m, "alpha": 0.9, "k": 3, "legacy_weight": settings.legacy_weight}
    return [
        {
            **common,
            "version": "v1",
            "arch": TEXT_ARCH,
            "data": {**common["data"], "subset": "half-samples"},
            "method": {"name": "none"},
        },
        {**common, "version": "v2-none", "arch": TEXT_ARCH, "method": {"name": "none"}, "old": old},
        {
            **common,
            "version": "v2-elodi",
            "arch": TEXT_ARCH,
            "old": old,
            "train": {**common["train"], "student_epochs": 3 * settings.epochs},
            "method": elodi,
        },
    ]


@dataclass(frozen=True)
class Verdict:
    """ELODI's NFR against the no-treatment spread, and the demo's three targets."""

    none_nfrs: list[float]  # NFR vs v1 of each plain v2 training (v2-none and the replicas)
    none_ers: list[float]
    elodi_nfr: float
    elodi_er: float
    paragon_nfr: float | None
    max_ratio: float = 0.85  # ELODI's NFR at most this × no treatment's (the text demo: 0.8)
    below_spread: bool = True  # also more than 2 std below the no-treatment spread (the image demo)

    @property
    def none_nfr(self) -> tuple[float, float]:
        """Mean and sample std (ddof 1) of the no-treatment NFRs."""
        return float(np.mean(self.none_nfrs)), float(np.std(self.none_nfrs, ddof=1)) if len(self.none_nfrs) > 1 else 0.0

    @property
    def ratio(self) -> float:
        return self.elodi_nfr / self.none_nfr[0]

    @property
    def z(self) -> float | None:
        """How many no-treatment standard deviations ELODI's NFR lies below their mean."""
        mean, std = self.none_nfr
        return None if std == 0 else (mean - self.elodi_nfr) / std

    @property
    def er_increase(self) -> float:
        return self.elodi_er - float(np.mean(self.none_ers))

    def checks(self) -> list[tuple[str, bool]]:
        spread = (
            f"more than 2 std below it (z = {self.z:.1f})" if self.z is not None else "more than 2 std below it",
            self.z is not None and self.z > 2,
        )
        return [
            (f"NFR ≤ {self.max_ratio}× no treatment's ({self.ratio:.2f}×)", self.ratio <= self.max_ratio),
            *([spread] if self.below_spread else []),
            (f"ER ≤ no treatment's + 0.3 pt ({100 * self.er_increase:+.2f} pt)", self.er_increase <= 0.003),
        ]


def verdict(results: Sequence[PipelineResult], replica_ids: dict[str, np.ndarray], text: bool = False) -> Verdict:
    """The demo's verdict from its three results and the replicas' eval predictions (class ids or
    logits; plain trainings of v2's architecture, seeds of their own): NFR and ER of each against
    v1's predictions."""
    from workers.metrics import error_rate, negative_flip_rate

    elodi = results[-1]
    labels = np.load(elodi.labels)
    old = np.load(elodi.predictions["old"])
    plain = [np.load(results[1].predictions["new"]), *replica_ids.values()]
    paragon = elodi.metrics.get("paragon_vs_old")
    return Verdict(
        [negative_flip_rate(old, p, labels) for p in plain],
        [error_rate(p, labels) for p in plain],
        elodi.metrics["vs_old"]["nfr"],
        elodi.metrics["error_rate"],
        paragon["nfr"] if paragon else None,
        *((0.8, False) if text else ()),
    )


def run_demo(
    settings: DemoSettings, watch: StageWatch, announce: Callable[[str], None]
) -> tuple[list[PipelineResult], Verdict]:
    """v1, then v2-none and v2-elodi against v1's registered version, and the verdict (Ray must be
    initialised)."""
    from orchestrator.execution.evaluation import eval_split_predictions

    results: list[PipelineResult] = []
    plan, documents = None, demo_specs(settings)
    for index, document in enumerate(documents):
        if index:
            document["old"] = f"{settings.model}/{results[0].registered_version}"
        plan = preflight(parse_spec(document))
        announce(f"\n{plan.spec.version}: {plan.spec.arch}, method {plan.method}")
        watch.display.prefix = f"{plan.spec.version} "
        results.append(run_pipeline(plan, settings.out / plan.spec.version, watch))
    assert plan is not None  # demo_specs gives three documents
    replica_ids = eval_split_predictions(plan, {r.name: r.checkpoint for r in results[-1].replicas})
    return results, verdict(results, replica_ids, settings.text)
