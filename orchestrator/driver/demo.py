"""The demo: a real model update on Fashion-MNIST through the pipeline, in minutes.

Three update pipelines on an embedded local Ray, registered as versions of one model:

    v1        a small MLP (784-128) trained on half of the images — the deployed "old" model
    v2-none   the new architecture (784-512-512 MLP) on all of them, trained without treatment
    v2-elodi  the same architecture with ELODI: m replicas in parallel, distilled online into one
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.driver.pipeline import PipelineResult, run_pipeline
from orchestrator.driver.plan import preflight
from orchestrator.driver.watch import StageWatch
from pipelines.spec import parse_spec


@dataclass(frozen=True)
class DemoSettings:
    out: Path
    model: str = "congruent-demo"
    epochs: int = 6
    m: int = 4
    seed: int = 0
    train_limit: int | None = 24000
    eval_limit: int | None = None


def demo_specs(settings: DemoSettings) -> list[dict[str, Any]]:
    """The three spec documents; v2's `old` is filled in with v1's registered version."""
    common = {
        "model": settings.model,
        "data": {"dataset": "fashion-mnist", "train_limit": settings.train_limit, "eval_limit": settings.eval_limit},
        "train": {"epochs": settings.epochs, "batch_size": 128, "lr": 0.05, "seed": settings.seed, "augment": False},
        "resources": {"replica": {"cpus": 1}, "student": {"cpus": 1}, "teacher": {"cpus": 0.5}, "teacher_actors": 2},
        "storage": str(settings.out / "runs"),
    }
    v1_data = {**common["data"], "subset": "half-samples"}  # the old version saw half of the images
    return [
        {**common, "version": "v1", "arch": "mlp-small", "data": v1_data, "method": {"name": "none"}},
        {**common, "version": "v2-none", "arch": "mlp", "method": {"name": "none"}},
        {**common, "version": "v2-elodi", "arch": "mlp",
         "method": {"name": "elodi", "m": settings.m, "alpha": 0.8, "k": 10, "topk_by": "teacher"}},
    ]


def run_demo(settings: DemoSettings, watch: StageWatch, announce: Callable[[str], None]) -> list[PipelineResult]:
    """v1, then v2-none and v2-elodi against v1's registered version (Ray must be initialised)."""
    results: list[PipelineResult] = []
    old = None
    for document in demo_specs(settings):
        if old is not None:
            document["old"] = old
        plan = preflight(parse_spec(document))
        announce(f"\n{plan.spec.version}: {plan.spec.arch}, method {plan.method}")
        watch.display.prefix = f"{plan.spec.version} "
        results.append(run_pipeline(plan, settings.out / plan.spec.version, watch))
        old = old or f"{plan.spec.model}/{results[-1].registered_version}"
    return results
