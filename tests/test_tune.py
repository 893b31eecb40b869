"""A real Ray Tune search of 4 trials on a Fashion-MNIST slice, on the two-node cluster."""

import json

import pytest
from mlflow import MlflowClient

from conftest import SPEC_RESOURCES
from orchestrator.cli import main
from workers.models.architectures import build_model
from workers.models.checkpoints import ModelSettings, save_checkpoint
from workers.training.config import TrainConfig
from workers.training.trainer import train
from workers.trial_choice import pick_trial

# one pool actor: trials run one at a time (1 CPU each beside the pool, on the 2-CPU test cluster), so a
# second actor is only another process to start
RESOURCES = {**SPEC_RESOURCES, "teacher_actors": 1}


@pytest.fixture(scope="module")
def old_checkpoint(fashion_mnist, tmp_path_factory) -> str:
    """The old model both searches start from: an mlp-small trained one epoch on 1,000 images."""
    old = build_model("mlp-small", 10, seed=3)
    train(old, fashion_mnist.train.take(slice(0, 1000)), TrainConfig(epochs=1, lr=0.05, seed=3))
    return str(save_checkpoint(tmp_path_factory.mktemp("tune-old") / "old.pt", old, ModelSettings("mlp-small", 10)))


def test_the_pick_and_its_front_are_chosen_on_the_validation_split_never_the_eval_split():
    """Trial b is best on the eval split, trial a on the validation split: the gate later tests the
    pick on the eval split, so choosing there would pass on the split's luck (before: chose b)."""
    from orchestrator.driver.tune import choose

    def trial(name, val_er, val_nfr, er, nfr):
        return {"trial_id": name, "val_error_rate": val_er, "val_nfr": val_nfr, "error_rate": er, "nfr": nfr}

    trials = [trial("a", 0.20, 0.02, 0.21, 0.05), trial("b", 0.20, 0.04, 0.20, 0.01), trial("c", 0.30, 0.01, 0.19, 0.0)]
    front, pick = choose(trials, val_reference=0.20, tolerance=0.01)
    assert pick == 0  # c has the lowest val NFR but a val ER above 0.20 + 0.01
    assert front == [0, 2]  # b is dominated by a on the validation split


def test_tune_trains_the_replicas_once_and_picks_by_the_rule(ray_cluster, old_checkpoint, spec_file, tmp_path, capsys):
    tolerance = 0.2
    spec = spec_file(
        model="tuned",
        old=old_checkpoint,
        resources=RESOURCES,
        method={"name": "elodi", "m": 2},
        tune={"search": "grid", "space": {"alpha": [0.5, 0.9], "k": [3, 10]}, "er_tolerance": tolerance},
    )
    code = main(["tune", str(spec), "--out", str(tmp_path / "out"), "--register-best"])
    out = capsys.readouterr().out
    assert code == 0
    record = json.loads((tmp_path / "out" / "tune.json").read_text())
    trials = record["trials"]
    configs = sorted((t["config"]["alpha"], t["config"]["k"]) for t in trials)
    assert configs == [(0.5, 3), (0.5, 10), (0.9, 3), (0.9, 10)]

    # the replicas were trained once, by the replica stage; every trial was served by the shared pool
    assert len(record["replicas"]) == 2 and all(r["epochs_run"] == 1 for r in record["replicas"])
    assert all(t["steps"] == 16 for t in trials)
    # the paragon is the mean of the replicas' eval logits the search computes anyway: no pool batch for it
    assert record["teacher_batches_served"] == sum(t["steps"] for t in trials)
    client = MlflowClient()
    experiment = client.get_experiment_by_name("tuned")
    names = [r.info.run_name for r in client.search_runs([experiment.experiment_id])]
    assert sorted(n for n in names if n.startswith("replica")) == ["replica-0", "replica-1"]
    assert sum(n.startswith("trial-") for n in names) == 4

    # the pick, on the validation split: lowest val NFR among trials within the no-treatment val ER + tolerance
    pick, reference = record["pick"], record["no_treatment_val_error_rate"]
    on_val = [{"error_rate": t["val_error_rate"], "nfr": t["val_nfr"]} for t in trials]
    assert pick == pick_trial(on_val, reference, tolerance)
    eligible = [t for t in trials if t["val_error_rate"] <= reference + tolerance]
    assert pick is not None and trials[pick]["val_nfr"] == min(t["val_nfr"] for t in eligible)
    assert "pick" in out and (tmp_path / "out" / "er_nfr.png").stat().st_size > 10_000
    version = client.get_model_version("tuned", "1")
    assert version.tags["method"] == "elodi" and version.tags["nfr"] == f"{trials[pick]['nfr']:.6f}"


def test_asha_stops_weak_trials_and_the_search_picks_among_the_finished(
    ray_cluster, old_checkpoint, spec_file, tmp_path, capsys
):
    """ASHA ends trials after an epoch without their final report: they are listed as stopped early,
    not taken for failures, and the pick comes from the trials that finished."""
    spec = spec_file(
        model="asha",
        old=old_checkpoint,
        resources=RESOURCES,
        method={"name": "elodi", "m": 2},
        train={"epochs": 3, "batch_size": 128, "lr": 0.05, "seed": 0},
        tune={
            "search": "grid",
            "scheduler": "asha",
            "space": {"lr": [0.05, 0.00001], "k": [3, 10]},
            "er_tolerance": 0.5,
        },
    )
    code = main(["tune", str(spec), "--out", str(tmp_path / "out")])
    out = capsys.readouterr().out
    assert code == 0
    record = json.loads((tmp_path / "out" / "tune.json").read_text())
    finished = {t["trial_id"] for t in record["trials"]}
    assert len(finished) + len(record["stopped_early"]) == 4 and not finished & set(record["stopped_early"])
    assert all(t["steps"] == 3 * 16 for t in record["trials"])  # a finished trial ran every epoch
    assert record["pick"] is not None and record["trials"][record["pick"]]["trial_id"] in finished
    if record["stopped_early"]:
        assert "stopped early by ASHA" in out
