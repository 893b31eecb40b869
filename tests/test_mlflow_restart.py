"""The MLflow server restarted mid-run: the client's bounded retries carry the run across the gap,
no metric is lost and a version is registered once; an unreachable server is one line, quickly."""

import os
import signal
import threading
import time

import mlflow
import numpy as np
import yaml
from mlflow import MlflowClient

from orchestrator.cli import main
from orchestrator.tracking import registry, runs, store
from orchestrator.tracking.ledger import write_ledger
from orchestrator.tracking.version_record import VersionRecord
from processes import free_port
from reliability_records import record
from servers import start_mlflow_server
from workers.models.checkpoints import ModelSettings, save_checkpoint

STEPS = 40
FINGERPRINT = "f" * 16


def log_steps(run_id: str, done: list, errors: list) -> None:
    """One metric row per step through runs.log_history, a step every 0.1 s: the server is killed
    after the 5th and the rest wait out its restart in the client's retries, so the pause only
    spaces the steps (at 0.25 s the 35 after the restart took 9 s of sleeping)."""
    try:
        for step in range(STEPS):
            runs.log_history(run_id, [{"epoch": step, "loss": 1.0 / (step + 1)}])
            done.append(step)
            time.sleep(0.1)
    except Exception as e:  # noqa: BLE001 - reported by the test
        errors.append(e)


def evaluated_checkpoint(folder) -> str:
    """What `register_once` registers: a checkpoint (its ledger is logged by `log_ledger`)."""
    settings = ModelSettings("mlp-small", 10)
    return str(save_checkpoint(folder / "model.pt", settings.build(seed=1), settings))


def log_ledger(folder) -> None:
    logits = np.random.default_rng(0).normal(size=(20, 10)).astype(np.float32)
    ledger = write_ledger(folder / "predictions.parquet", logits, np.arange(20) % 10, np.arange(20), FINGERPRINT)
    mlflow.log_artifact(str(ledger), "ledger")


def test_metrics_and_registration_survive_a_server_restart(tmp_path, monkeypatch):
    backend, artifacts = f"sqlite:///{tmp_path / 'backend.db'}", str(tmp_path / "artifacts")
    server = start_mlflow_server(tmp_path / "server", backend, artifacts, {})
    try:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", server.uri)
        store.configure()
        mlflow.set_experiment(experiment_id=store.experiment_id("restarted"))
        with mlflow.start_run(run_name="v1") as run:
            done, errors = [], []
            logger = threading.Thread(target=log_steps, args=(run.info.run_id, done, errors), daemon=True)
            logger.start()
            while len(done) < 5 and logger.is_alive():
                time.sleep(0.05)
            server.stop_signal = signal.SIGKILL  # a crash, not a clean shutdown
            killed_pid = server.proc.pid
            server.stop()
            down_at = time.monotonic()
            logged_before_restart = len(done)
            server = start_mlflow_server(tmp_path / "server", backend, artifacts, {}, port=server.port)
            downtime = time.monotonic() - down_at
            logger.join(timeout=180)
            assert not logger.is_alive() and not errors, errors
            log_ledger(tmp_path)
            checkpoint = evaluated_checkpoint(tmp_path)
            version = VersionRecord(fingerprint=FINGERPRINT, spec_hash="0123abcd", method="none")
            first, registered = registry.register_once("restarted", checkpoint, version)
            second, again = registry.register_once("restarted", checkpoint, version)
        client = MlflowClient()
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "loss")]
        versions = [str(v.version) for v in client.search_model_versions("name='restarted'")]
        record(
            "fault",
            fault="MLflow server SIGKILL and restart on the same port",
            killed_pid=killed_pid,
            survived=not errors,
            downtime_s=round(downtime, 1),
            steps_logged=len(set(steps)),
            steps_expected=STEPS,
            logged_before_restart=logged_before_restart,
            versions=versions,
        )
        assert logged_before_restart < STEPS  # the restart happened while the run was logging
        assert sorted(steps) == list(range(STEPS))  # every step once: none lost, none doubled
        assert first == second == "1" and versions == ["1"] and registered and not again
    finally:
        server.stop()


def test_a_registration_doubled_by_a_retried_post_keeps_one_version(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    store.configure()
    mlflow.set_experiment("doubled")
    with mlflow.start_run() as run:
        mlflow.log_text("x", "checkpoint/model.pt")
    client = MlflowClient()
    client.create_registered_model("doubled")
    for _ in range(2):  # what a POST replayed after its lost response leaves behind
        client.create_model_version("doubled", f"runs:/{run.info.run_id}/checkpoint", run.info.run_id)
    assert registry.drop_duplicate_versions("doubled", run.info.run_id) == "1"
    assert [str(v.version) for v in client.search_model_versions("name='doubled'")] == ["1"]


def test_an_unreachable_server_fails_in_bounded_time_with_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "model": "nowhere",
                "version": "v1",
                "arch": "mlp-small",
                "data": {"train_limit": 300, "eval_limit": 100},
                "method": {"name": "none"},
            }
        )
    )
    started = time.monotonic()
    code = main(["run", str(spec)])
    seconds = time.monotonic() - started
    err = capsys.readouterr().err.strip()
    assert code == 1 and len(err.splitlines()) == 1 and "Traceback" not in err
    assert "did not answer after 2 retries" in err and seconds < 30
    record("bad_environment", name="mlflow-unreachable", seconds=round(seconds, 1), stderr=err)


def test_a_rerun_closes_the_runs_its_dead_driver_left_running(tmp_path, monkeypatch):
    import socket
    import subprocess

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    store.configure()
    experiment = store.experiment_id("orphans")
    dead = subprocess.Popen(["true"])
    dead.wait()
    client = MlflowClient()
    drivers = {
        "dead": (socket.gethostname(), dead.pid),
        "alive": (socket.gethostname(), os.getpid()),
        "elsewhere": ("another-host", dead.pid),
    }
    started = {}
    for name, (host, pid) in drivers.items():
        run = client.create_run(
            experiment, run_name=name, tags={"spec_hash": "abc", "driver.host": host, "driver.pid": str(pid)}
        )
        started[name] = run.info.run_id
    child = client.create_run(experiment, tags={"mlflow.parentRunId": started["dead"]}).info.run_id
    assert runs.close_orphaned_runs(experiment, "abc", str(tmp_path / "tmp")) == [started["dead"]]
    status = {name: client.get_run(run_id).info.status for name, run_id in started.items()}
    assert status == {"dead": "KILLED", "alive": "RUNNING", "elsewhere": "RUNNING"}
    assert client.get_run(child).info.status == "KILLED"
