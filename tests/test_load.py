"""Many pipelines at once on one cluster and one registry, with a fault while they run
(tests/load_harness.py): every spec registered exactly once, parents as resolved, NFRs as
`congruent compare` computes them, and `congruent status` showing jobs waiting in Ray's queue.

CI runs the small load (one model: 4 jobs, one of them a duplicate submission) with the worker
node's raylet killed. `python -m benchmarks.code.reliability --load` sets CONGRUENT_LOAD=full: three
models (10 jobs), once without a fault and once with each fault."""

import json
import os

import pytest

from load_harness import FAULTS, load_stack, run_load
from orchestrator.cli import main
from reliability_records import record
from services import pointed_at

pytestmark = pytest.mark.bench  # the load harness: jobs on a cluster and services of its own, with a fault

FULL = os.environ.get("CONGRUENT_LOAD") == "full"
MODELS = ["load-a", "load-b", "load-c"] if FULL else ["load-a"]


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    with load_stack(tmp_path_factory.mktemp("load")) as started:
        yield started


@pytest.mark.parametrize("fault", FAULTS if FULL else ["raylet"])
def test_concurrent_submissions_register_every_spec_exactly_once(stack, fault, monkeypatch, capsys):
    for key, value in stack.env.items():
        monkeypatch.setenv(key, value)
    models = [f"{m}-{fault}" for m in MODELS]  # each load its own chains
    # this process reads the load's registry (not the one an earlier test pointed mlflow at)
    with pointed_at(stack.env["MLFLOW_TRACKING_URI"], monkeypatch):
        outcome = run_load(stack, models, fault)
    record("load", **outcome)
    print(json.dumps(outcome, indent=1))  # shown when an assertion fails
    assert outcome["lost"] == 0 and outcome["duplicated"] == 0, outcome
    assert outcome["registered"] == outcome["specs"], outcome
    assert outcome["wrong_parents"] == [] and outcome["nfr_mismatches"] == [], outcome
    assert outcome["nfr_checked"] == outcome["specs"], outcome
    assert outcome["most_waiting_at_once"] >= 1, outcome  # more jobs than CPUs: some wait in Ray's queue
    if fault == "none":
        assert outcome["failed"] == 0, outcome  # none fails for lack of resources
    capsys.readouterr()
    assert main(["status", "--jobs-address", stack.cluster.dashboard]) == 0
    table = capsys.readouterr().out
    assert "0 waiting, 0 running" in table and "finished SUCCEEDED" in table, table
    assert all(model in table for model in models), table
