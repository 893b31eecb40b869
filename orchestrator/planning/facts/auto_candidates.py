"""`method: auto`: which candidates it trains (pipelines/auto.py), bcwi only where it can interpolate
the old weights (same architecture and adapter), and what bcwi's model reads (the old model's own)."""

from __future__ import annotations

from orchestrator.planning.facts.kinds import AutoCandidates, Found, OldModel, Problems
from orchestrator.planning.plan import adapter_of
from pipelines.auto import auto_choice


def check(found: Found) -> AutoCandidates | Problems | None:
    spec, old = found.settled, found.get(OldModel)
    if spec.method.name != "auto" or old is None:
        return None
    why_not = None
    if old.shape.arch != spec.arch:
        why_not = f"it interpolates weights, and arch {spec.arch!r} is not the old model's ({old.shape.arch!r})"
    elif old.adapter != adapter_of(spec):
        why_not = "it interpolates weights, and train.adapter is not the old model's"
    choice = auto_choice(spec.method, why_not)
    if len(choice.candidates) == 1:
        left_out = "; ".join(f"{name}: {why}" for name, why in choice.skipped)
        return Problems.of("method", [f"auto has no candidate beside no treatment ({left_out})"])
    return AutoCandidates(choice, None if old.settings is None else old.settings.inputs)
