"""A version is complete or invisible (registry._publish): a driver killed (SIGKILL) at any step of
publication leaves a version every reader but `congruent versions` ignores, and its rerun discards;
Ctrl-C (SIGINT, and `congruent cancel`) there waits until the version is complete, then stops."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from mlflow import MlflowClient

from orchestrator.cli import main
from orchestrator.tracking import locks, registry, store
from orchestrator.tracking.version_refs import RegistryError
from reliability_records import record

# where the driver is interrupted: after the version is created, before each later step
STEPS = ("register_model", "alias", "matrix", "describe", "complete")

DRIVER = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    import mlflow
    from mlflow import MlflowClient
    from orchestrator.tracking import registry
    from test_publication import publish

    model, step, number, folder = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])

    def interrupt():
        os.kill(os.getpid(), number)

    def before(owner, name):
        real = getattr(owner, name)
        def wrapped(*args, **kwargs):
            interrupt()
            return real(*args, **kwargs)
        setattr(owner, name, wrapped)

    real_register = mlflow.register_model
    def register_then_interrupt(*args, **kwargs):
        registered = real_register(*args, **kwargs)
        interrupt()
        return registered
    if step == "register_model":
        mlflow.register_model = register_then_interrupt
    elif step == "alias":
        before(MlflowClient, "set_registered_model_alias")
    elif step == "matrix":
        before(registry, "write_matrix_files")
    elif step == "describe":
        before(registry.descriptions, "describe")
    elif step == "complete":
        before(MlflowClient, "delete_model_version_tag")

    print("registered", publish(model, folder), flush=True)
    """
)


def publish(model: str, folder) -> tuple[str, bool]:
    """What the driver publishes: v1 of `model`, its ledger and the checkpoint the test wrote in
    `folder` (`checkpoint`: so that the driver's process needs no torch), registered once."""
    import mlflow
    import numpy as np

    from orchestrator.tracking.ledger import write_ledger
    from orchestrator.tracking.version_record import VersionRecord

    store.configure()
    mlflow.set_experiment(model)
    labels = np.arange(100) % 10
    with mlflow.start_run(run_name="v1"):
        logits = np.eye(10, dtype=np.float32)[labels]
        ledger = write_ledger(folder / "predictions.parquet", logits, labels, np.arange(100), "fp")
        mlflow.log_artifact(str(ledger), "ledger")
        spec = VersionRecord(method="none", arch="mlp-small", label="v1", fingerprint="fp", spec_hash="s1")
        return registry.register_once(model, str(folder / "model.pt"), spec)


def checkpoint(folder) -> None:
    from workers.models.checkpoints import ModelSettings, save_checkpoint

    settings = ModelSettings("mlp-small", 10)
    save_checkpoint(folder / "model.pt", settings.build(seed=1), settings)


def _publish_interrupted(tmp_path, model: str, step: str, number: int) -> subprocess.CompletedProcess:
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    checkpoint(tmp_path)
    tests = str(Path(__file__).resolve().parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), tests])}
    return subprocess.run(
        [sys.executable, str(script), model, step, str(number), str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


@pytest.fixture
def sqlite_store(tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_REGISTRY_URI", uri)
    store.configure()
    return uri


@pytest.mark.parametrize("step", STEPS)
def test_a_driver_killed_while_publishing_leaves_nothing_visible_and_its_rerun_cleans_up(
    tmp_path, sqlite_store, step, capsys, monkeypatch
):
    model = f"killed-{step}"
    done = _publish_interrupted(tmp_path, model, step, signal.SIGKILL)
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    assert registry.versions(model) == [] and registry.chain(model) == []  # invisible
    (left,) = registry.versions(model, incomplete=True)
    assert registry.chain_matrix(model) == ([], [], [])
    with pytest.raises(RegistryError, match="incomplete"):
        registry.resolve(f"{model}/{left.version}")
    assert main(["versions", model]) == 0
    shown = capsys.readouterr().out
    assert (
        f"{model}: 0 versions" in shown
        and "publication interrupted" in shown
        and shown.rstrip().endswith(f": {left.version}")
    )
    MlflowClient().set_terminated(left.run_id, "KILLED")  # what the rerun's pipeline_run does to a dead driver's run
    # the rerun, here: it breaks the killed driver's registration lock after a short lease without renewal
    # (tests/test_locks.py covers the lease itself), or it would wait its 60 s
    monkeypatch.setattr(locks, "LEASE_S", 4.0)
    monkeypatch.setattr(locks, "RENEW_S", 0.25)
    assert publish(model, tmp_path)[1]
    (complete,) = registry.versions(model)
    assert str(complete.version) != str(left.version)
    assert registry.versions(model, incomplete=True) == []  # discarded by the rerun
    record(
        "security", check=f"driver SIGKILLed at publication step {step!r}: nothing visible, rerun cleans", passed=True
    )


@pytest.mark.parametrize("step", STEPS)
def test_ctrl_c_while_publishing_waits_for_the_version_to_complete(tmp_path, sqlite_store, step):
    model = f"interrupted-{step}"
    done = _publish_interrupted(tmp_path, model, step, signal.SIGINT)
    assert done.returncode != 0 and "KeyboardInterrupt" in done.stderr, done.stderr[-2000:]
    (version,) = registry.versions(model)  # complete: alias, matrix, descriptions
    assert registry.versions(model, incomplete=True) == []
    assert registry.resolve(f"{model}@challenger").version == str(version.version)
    assert MlflowClient().get_model_version(model, version.version).description
    artifacts = {info.path for info in MlflowClient().list_artifacts(version.run_id)}
    assert "nfr_matrix.json" in artifacts
    record(
        "security", check=f"Ctrl-C at publication step {step!r}: deferred until the version is complete", passed=True
    )
