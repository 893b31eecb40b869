"""benchmarks/code/walk.py's counting, on walks written by hand: what is a climb back up and what is a
return for a decision once the plan is made."""

from benchmarks.code.walk import is_decision, summarise


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


def test_a_reader_returns_to_a_room_left_on_coming_back_to_it_not_on_a_function_read_before():
    """run → preflight → store, back to preflight (a return to a room left), → registry, back to
    preflight (another); a second call of store's function is not followed; run gets the plan back
    (its room left too: a third)."""
    from benchmarks.code.walk import rooms_revisited

    moves = [
        ["call", 1, "preflight", "planning.preflight", "commands.run"],
        ["call", 2, "configure", "tracking.store", "planning.preflight"],
        ["return", 2, "", "tracking.store", ""],
        ["call", 3, "resolve", "tracking.registry", "planning.preflight"],
        ["call", 4, "configure", "tracking.store", "tracking.registry"],  # read before: not followed
        ["return", 4, "", "tracking.store", ""],
        ["return", 3, "", "tracking.registry", ""],
        ["return", 1, "", "planning.preflight", ""],
    ]
    walk = rooms_revisited(moves, root="commands.run")
    assert walk["rooms"] == 4
    assert walk["returns_to_a_room_left"] == 3
    assert walk["returns_by_room"] == {"planning.preflight": 2, "commands.run": 1}


def test_the_walk_starts_at_run_args_what_the_command_line_does_before_is_not_followed():
    """cli builds its parser (each command's `register`: back in run.py's room each time) before it
    calls run(args): only the moves inside that call count."""
    from benchmarks.code.walk import rooms_revisited

    parser = [
        ["call", 1, "compare.py:1:register", "commands.compare", "cli"],
        ["return", 1, "", "commands.compare", ""],
        ["call", 2, "check.py:1:register", "commands.check", "cli"],
        ["return", 2, "", "commands.check", ""],
    ]
    inside = [
        ["call", 4, "preflight", "planning.preflight", "commands.run"],
        ["call", 5, "configure", "tracking.store", "planning.preflight"],
        ["return", 5, "", "tracking.store", ""],
        ["return", 4, "", "planning.preflight", ""],
        ["call", 6, "table", "views.tables", "commands.run"],
        ["return", 6, "", "views.tables", ""],
    ]
    moves = [
        *parser,
        ["call", 3, "run.py:70:run", "commands.run", "cli"],
        *inside,
        ["return", 3, "", "commands.run", ""],
    ]
    walk = rooms_revisited(moves, root="commands.run")
    assert walk == rooms_revisited(inside, root="commands.run")
    assert walk["returns_by_room"] == {"planning.preflight": 1, "commands.run": 2}
