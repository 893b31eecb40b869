"""`congruent check`: each spec checked as `congruent run` checks it before Ray starts — preflight's
checks (planning/preflight.py: `check_spec`), then whether the cluster can hold its stages — and a
later spec checked against what an earlier one registers."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.execution.cluster import check_cluster
from orchestrator.planning.plan import cluster_demand
from orchestrator.planning.preflight import Shape, check_spec
from pipelines.spec import SpecError


@dataclass(frozen=True)
class Checked:
    """`congruent check`'s answer for one spec: its problems (each line names the spec), or what it
    will run."""

    path: str
    problems: list[str]
    summary: str = ""


def check_specs(paths: list[str], ray_address: str | None = None) -> list[Checked]:
    """Check each spec as `congruent run` does before Ray starts — `check_spec`, then what the
    cluster can hold (this machine's cores for an embedded Ray; a cluster at `ray_address` or
    RAY_ADDRESS is joined and asked) — in order, a later spec's `old: MODEL@challenger` (or
    `@champion`, when the earlier spec has a promotion gate) checked against the earlier spec
    that registers it. Starts no Ray and trains nothing."""
    from pipelines.spec import load_spec

    upcoming: dict[str, Shape] = {}
    results = []
    for path in paths:
        try:
            spec = load_spec(path)
        except SpecError as e:
            results.append(Checked(path, e.problems))  # load_spec's lines name the file
            continue
        inspection = check_spec(spec, upcoming)
        problems = list(inspection.problems)
        demand = cluster_demand(spec)
        try:
            check_cluster(spec, ray_address, demand.replicas, demand.student, demand.pool_actors)
        except SpecError as e:
            problems += e.problems
        if inspection.shape is not None:  # what the aliases will name once this spec has run
            upcoming[f"{spec.model}@challenger"] = inspection.shape
            if spec.promote is not None:  # its gate may move champion; without one the champion stays
                upcoming[f"{spec.model}@champion"] = inspection.shape
        results.append(Checked(path, [f"{path}: {line}" for line in problems], inspection.summary))
    return results
