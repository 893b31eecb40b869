"""Drivers that start together on the embedded MLflow store of a new directory: the sqlite schema is
created once (under a lock), every run is tracked and every pipeline registers its own version."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from mlflow import MlflowClient

ROOT = Path(__file__).resolve().parent.parent

# One driver's first MLflow steps, started together with another one by a barrier on files: both
# open the store at the same moment, as two terminals running `congruent run` do.
TRACK = """
import sys, time
from pathlib import Path
import mlflow
from orchestrator.tracking import store

Path(f"ready-{sys.argv[1]}").touch()
while len(list(Path(".").glob("ready-*"))) < 2:
    time.sleep(0.001)
store.configure()
mlflow.set_experiment(experiment_id=store.experiment_id("together"))
with mlflow.start_run(run_name=sys.argv[1]):
    mlflow.log_metric("error_rate", 0.1)
"""


def clean_env() -> dict:
    """The embedded default store: no MLFLOW_TRACKING_URI; this checkout's code."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI", "RAY_ADDRESS")
    }
    return {**env, "PYTHONPATH": str(ROOT)}


def runs_in(folder: Path, experiment: str) -> list:
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    return client.search_runs([client.get_experiment_by_name(experiment).experiment_id])


@pytest.mark.parametrize("attempt", range(3))
def test_drivers_opening_a_new_embedded_store_together_both_track(tmp_path, attempt):
    drivers = [
        subprocess.Popen(
            [sys.executable, "-c", TRACK, name],
            cwd=tmp_path,
            env=clean_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("a", "b")
    ]
    try:  # a driver that hangs is killed, not left to the tests after this one
        outputs = [driver.communicate(timeout=180) for driver in drivers]
    finally:
        for driver in drivers:
            driver.kill()
    assert [driver.returncode for driver in drivers] == [0, 0], [err[-3000:] for _, err in outputs]
    assert sorted(run.info.run_name for run in runs_in(tmp_path, "together")) == ["a", "b"]


def test_two_congruent_runs_started_together_in_a_new_directory_both_register(tmp_path):
    specs = []
    for version in ("v1", "v2"):
        specs.append(tmp_path / f"{version}.yaml")
        specs[-1].write_text(
            yaml.safe_dump(
                {
                    "model": "together",
                    "version": version,
                    "arch": "mlp-small",
                    "method": {"name": "none"},
                    "data": {"train_limit": 500, "eval_limit": 200},
                    "train": {"epochs": 1, "seed": int(version[1])},
                    "resources": {"student": {"cpus": 1}},
                }
            )
        )
    drivers = [
        subprocess.Popen(
            [sys.executable, "-m", "orchestrator", "run", str(spec), "--quiet", "--json"],
            cwd=tmp_path,
            env={**clean_env(), "RAY_AUTH_MODE": "disabled"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for spec in specs
    ]
    try:  # a driver that hangs is killed (its embedded Ray with it), not left to the tests after this one
        outputs = [driver.communicate(timeout=600) for driver in drivers]
    finally:
        for driver in drivers:
            driver.kill()
    assert [driver.returncode for driver in drivers] == [0, 0], [err[-3000:] for _, err in outputs]
    registered = sorted(json.loads(out)["registered_version"] for out, _ in outputs)
    assert registered == ["1", "2"]
    assert sorted(
        run.info.status for run in runs_in(tmp_path, "together") if "mlflow.parentRunId" not in run.data.tags
    ) == ["FINISHED", "FINISHED"]
