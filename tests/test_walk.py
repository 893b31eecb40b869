"""benchmarks/walk.py's counting, on walks written by hand: what is a climb back up and what is a
return for a decision once the plan is made."""

from benchmarks.walk import is_decision, summarise


def test_a_walk_counts_steps_climbs_against_the_imports_and_returns_after_the_plan():
    steps = [
        ["orchestrator.commands.run", "orchestrator.planning.preflight", "preflight", False],
        ["orchestrator.planning.preflight", "workers.tasks.resolve", "cached_splits", False],  # before the plan
        ["orchestrator.execution.cluster", "orchestrator.planning.streaming", "memory_limit", True],
        ["orchestrator.execution.evaluation", "workers.tasks.resolve", "cached_splits", True],
        ["orchestrator.driver.pipeline", "orchestrator.planning.plan", "Plan.needs_student", True],  # the Plan
        ["workers.tasks.bodies", "workers.tasks.resolve", "cached_splits", True],  # a worker's own data
        ["orchestrator.dataplane.objects", "orchestrator.execution.cluster", "worker_env", True],
    ]
    upward = {("orchestrator.dataplane.objects", "orchestrator.execution.cluster")}
    walk = summarise(steps, upward)
    assert walk["steps"] == 7 and walk["modules"] == 10
    assert walk["climbs"] == 1 and walk["climbs_by_pair"] == {
        "orchestrator.dataplane.objects → orchestrator.execution.cluster": 1
    }
    assert walk["returns_for_a_decision"] == 2
    assert set(walk["returns_by_call"]) == {
        "orchestrator.execution.cluster → orchestrator.planning.streaming.memory_limit",
        "orchestrator.execution.evaluation → workers.tasks.resolve.cached_splits",
    }


def test_asking_the_plan_or_its_pure_helpers_is_no_return_for_a_decision():
    assert not is_decision("orchestrator.execution.stages", "orchestrator.planning.plan", "pool_topk")
    assert not is_decision("workers.tasks.bodies", "workers.tasks.resolve", "cached_splits")
    assert is_decision("orchestrator.driver.tune", "orchestrator.planning.model_inputs", "text_inputs")
    assert is_decision("orchestrator.driver.demo", "orchestrator.driver.preflight", "preflight")  # an older layout
