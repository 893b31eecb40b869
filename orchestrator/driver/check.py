"""A spec checked as `congruent run` and `congruent check` both check it before Ray starts: preflight's
checks (planning/preflight.py), then whether the cluster can hold the stages of the spec as preflight
settled it — one function for both commands, so they find the same problems in the same words — and,
for `congruent check` and the demo, a later spec checked against what an earlier one registers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from orchestrator.execution.cluster import check_cluster
from orchestrator.planning.facts.kinds import Found, Shape
from orchestrator.planning.plan import Demand, Plan, cluster_demand
from orchestrator.planning.preflight import find, plan_of, shape_of, summary
from pipelines.spec import SpecError, UpdateSpec


def spec_problems(
    found: Found, ray_address: str | None, demand_of: Callable[[UpdateSpec], Demand] = cluster_demand
) -> list[str]:
    """Preflight's problems, then what the cluster can hold of the settled spec's stages (`demand_of`
    them: this machine's cores for an embedded Ray; a cluster at `ray_address` or RAY_ADDRESS is
    joined and asked)."""
    spec = found.settled
    demand = demand_of(spec)
    try:
        check_cluster(spec, ray_address, demand.replicas, demand.student, demand.pool_actors)
    except SpecError as e:
        return [*found.problems, *e.problems]
    return list(found.problems)


def checked_plan(
    spec: UpdateSpec, ray_address: str | None, demand_of: Callable[[UpdateSpec], Demand] = cluster_demand
) -> tuple[Plan | None, list[str]]:
    """`congruent run`'s checks: the Plan of a spec with no problem, else its problems."""
    found = find(spec)
    problems = spec_problems(found, ray_address, demand_of)
    return (None if problems else plan_of(found)), problems


@dataclass(frozen=True)
class Checked:
    """`congruent check`'s answer for one spec: its problems (each line names the spec), or what it
    will run."""

    path: str
    problems: list[str]
    summary: str = ""


def check_in_chain(spec: UpdateSpec, ray_address: str | None, upcoming: dict[str, Shape]) -> tuple[list[str], str]:
    """One spec of a chain checked as `congruent run` checks it before Ray starts, its
    `old: MODEL@challenger` (or `@champion`) checked against `upcoming`, the versions the specs
    before it register; `upcoming` then learns what this one registers. (Its problems, else what
    it will run.)"""
    found = find(spec, settle_inputs=False, upcoming=upcoming)
    problems = spec_problems(found, ray_address)
    if (shape := shape_of(found)) is not None:  # what the aliases will name once this spec has run
        upcoming[f"{spec.model}@challenger"] = shape
        if spec.promote is not None:  # its gate may move champion; without one the champion stays
            upcoming[f"{spec.model}@champion"] = shape
    return problems, "" if problems else summary(found)


def check_specs(paths: list[str], ray_address: str | None = None) -> list[Checked]:
    """Check each spec as `congruent run` does before Ray starts, in order, a later spec's
    `old: MODEL@challenger` (or `@champion`, when the earlier spec has a promotion gate) checked
    against the earlier spec that registers it. Starts no Ray and trains nothing."""
    from pipelines.spec import load_spec

    upcoming: dict[str, Shape] = {}
    results = []
    for path in paths:
        try:
            spec = load_spec(path)
        except SpecError as e:
            results.append(Checked(path, e.problems))  # load_spec's lines name the file
            continue
        problems, said = check_in_chain(spec, ray_address, upcoming)
        results.append(Checked(path, [f"{path}: {line}" for line in problems], said))
    return results
