"""Ctrl-C during a pipeline: stages cancelled, their partial checkpoints deleted, the MLflow run KILLED,
nothing registered. Ctrl-C while `serve` places a version: what that start placed is deleted."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient

from conftest import SPEC_RESOURCES
from orchestrator.cli import main


def interrupt_once(args: list[str], uri: str, cwd: Path, started, timeout_s: float) -> tuple[int, str]:
    """`congruent ARGS` with its own MLflow store at `uri`; one SIGINT as soon as `started()` lists a
    file (the stage under attack has written a checkpoint). Its output goes to files, not pipes: a
    pipe nobody reads until the end can fill and block the driver. Returns the exit code and stderr."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "MLFLOW_REGISTRY_URI": uri, "RAY_ADDRESS": ""}
    with open(cwd / "driver.out", "w") as out, open(cwd / "driver.err", "w") as err:
        driver = subprocess.Popen(
            [sys.executable, "-m", "orchestrator", *args],
            stdout=out,
            stderr=err,
            env=env,
            cwd=cwd,
            preexec_fn=_as_a_background_job_of_a_script,
        )
        try:
            for _ in range(int(timeout_s * 10)):
                if started() or driver.poll() is not None:
                    break
                time.sleep(0.1)
            assert started(), "the stage never started: " + (cwd / "driver.err").read_text()[-2000:]
            driver.send_signal(signal.SIGINT)
            driver.wait(timeout=180)  # the clean-up: cancel, wait ≤ 30 s for the workers, delete, KILLED
        finally:
            driver.kill()
    return driver.returncode, (cwd / "driver.err").read_text()


def _as_a_background_job_of_a_script() -> None:
    """In the driver before it starts: SIGINT ignored and blocked, as a command started with `&` by a
    shell script inherits it (POSIX) and one started by Ray inherits it blocked — the driver must
    still stop on Ctrl-C (orchestrator/cli.py `ctrl_c_raises`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})


def assert_one_line(err: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "interrupted" in lines[0] and "KILLED" in lines[0], err[-2000:]
    assert "Traceback" not in err


def test_ctrl_c_marks_the_run_killed_and_registers_nothing(ray_cluster, spec_file, tmp_path):
    spec = spec_file(
        model="interrupted",
        arch="small-cnn",
        data={"train_limit": 6000, "eval_limit": 500},
        method={"name": "ensemble", "m": 2},
        train={"epochs": 200, "batch_size": 64, "lr": 0.05},  # far longer than the test takes
        resources={"replica": {"cpus": 1}, "teacher": {"cpus": 0.5}, "teacher_actors": 1, "fresh_stage_workers": False},
    )
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    storage = tmp_path / "storage"
    code, err = interrupt_once(
        ["run", str(spec), "--ray-address", ray_cluster.address],
        uri,
        tmp_path,
        lambda: storage.exists() and list(storage.rglob("replica-*.pt")),
        120,
    )
    assert code == 130, err[-2000:]
    assert_one_line(err)
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    experiment = client.get_experiment_by_name("interrupted")
    runs = client.search_runs([experiment.experiment_id], filter_string="tags.mlflow.runName = 'v2'")
    assert [run.info.status for run in runs] == ["KILLED"]
    assert client.search_model_versions("name='interrupted'") == []
    # a deliberate Ctrl-C leaves no partial checkpoint behind (a killed driver's stay: tests/test_faults.py)
    assert not [p for p in (tmp_path / "storage").rglob("*") if p.is_file()]
    # the replicas were cancelled, not left running on the cluster
    from ray.util.state import list_tasks

    for _ in range(60):
        running = list_tasks(
            address=ray_cluster.dashboard, filters=[("name", "=", "replica-0"), ("state", "=", "RUNNING")]
        )
        if not running:
            break
        time.sleep(0.5)
    assert not running


def test_ctrl_c_during_a_tune_search_deletes_its_trials_and_marks_the_run_killed(ray_cluster, spec_file, tmp_path):
    old = tmp_path / "old.pt"
    from workers.models.checkpoints import ModelSettings, save_checkpoint

    settings = ModelSettings("mlp-small", 10)
    save_checkpoint(old, settings.build(seed=3), settings)
    spec = spec_file(
        model="tune-interrupted",
        old=str(old),
        method={"name": "elodi", "m": 2},
        data={"train_limit": 2000, "eval_limit": 500},
        # the replicas (trained once, before the search) one epoch; the trials far longer than the test takes
        train={"epochs": 1, "student_epochs": 30, "lr": 0.05},
        resources={**SPEC_RESOURCES, "teacher_actors": 1},
        tune={"search": "grid", "space": {"alpha": [0.5, 0.9]}},
    )
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    trials = tmp_path / "storage" / "tune-interrupted" / "v2" / "tmp"
    code, err = interrupt_once(
        ["tune", str(spec), "--ray-address", ray_cluster.address, "--register-best"],
        uri,
        tmp_path,
        lambda: trials.exists() and list(trials.rglob("*.pt")),
        240,
    )
    assert code == 130, err[-2000:]
    assert_one_line(err)
    assert not [p for p in trials.rglob("*") if p.is_file()]  # this search's trial checkpoints are gone
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    experiment = client.get_experiment_by_name("tune-interrupted")
    runs = client.search_runs([experiment.experiment_id], filter_string="tags.mlflow.runName = 'v2-tune'")
    assert [run.info.status for run in runs] == ["KILLED"]
    assert client.search_model_versions("name='tune-interrupted'") == []


def test_ctrl_c_raises_in_a_command_whatever_sigint_was_before():
    """A process that inherited SIGINT ignored and blocked (a background job of a script, a process
    Ray started): inside `ctrl_c_raises` (every command runs there) SIGINT raises KeyboardInterrupt;
    afterwards the process's own setting is back."""
    probe = (
        "import os, signal, time\n"
        "from orchestrator.cli import ctrl_c_raises\n"
        "assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN\n"
        "try:\n"
        "    with ctrl_c_raises():\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "        time.sleep(5)\n"
        "    print('not interrupted')\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', signal.getsignal(signal.SIGINT) == signal.SIG_IGN)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[1],
        preexec_fn=_as_a_background_job_of_a_script,
    )
    assert done.stdout.strip() == "interrupted True", done.stdout + done.stderr


def test_after_ctrl_c_a_workers_output_no_longer_reaches_the_terminal(ray_cluster):
    """A driver joined to the cluster shows a task's print before Ctrl-C and none after (a cancelled
    worker that aborts prints Ray's crash dump, which buried the command's one line); it still
    stops on the press."""
    probe = (
        "import os, signal, sys, time, ray\n"
        "from orchestrator.cli import ctrl_c_raises\n"
        "from orchestrator.execution.cluster import connect\n"
        "connect(sys.argv[1])\n"
        "@ray.remote(num_cpus=0)\n"
        "def say(word):\n"
        "    print(word, flush=True)\n"
        "ray.get(say.remote('before-the-press'))\n"
        "time.sleep(3)\n"
        "try:\n"
        "    with ctrl_c_raises():\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "        time.sleep(5)\n"
        "except KeyboardInterrupt:\n"
        "    ray.get(say.remote('after-the-press'))\n"
        "    time.sleep(3)\n"
        "    print('interrupted', file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, ray_cluster.address],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[1],
        env={**os.environ, "RAY_ADDRESS": ""},
    )
    output = done.stdout + done.stderr
    assert "interrupted" in done.stderr, output[-2000:]
    assert "before-the-press" in output, output[-2000:]
    assert "after-the-press" not in output, output[-2000:]


def test_a_start_interrupted_while_a_version_is_placed_deletes_it_and_says_so_in_one_line(monkeypatch, capsys):
    """Ctrl-C while `serve` waits for a version's replicas: that version's application is deleted
    (as one not placed in time), and the command ends with one line and exit 130, no traceback."""
    from ray import serve

    from orchestrator.driver import serve as driver
    from orchestrator.serving.settings import Resources, ServeSettings

    deleted, statuses = [], iter([None, "DEPLOYING"])

    def status(name):
        try:
            return next(statuses)
        except StopIteration:
            raise KeyboardInterrupt from None

    monkeypatch.setattr(driver, "version_application", lambda *args: "the application")
    monkeypatch.setattr(driver, "replica_env", lambda: {})
    monkeypatch.setattr(driver, "_app_status", status)
    monkeypatch.setattr(driver.time, "sleep", lambda s: None)
    monkeypatch.setattr(serve, "run_many", lambda targets, **kwargs: None)
    monkeypatch.setattr(serve, "RunTarget", lambda target, name, route_prefix: name)
    monkeypatch.setattr(serve, "delete", deleted.append)
    with pytest.raises(KeyboardInterrupt):
        driver.start_version("m", "2", ServeSettings(), Resources(), 120.0)
    assert deleted == [driver.version_app_name("m", "2")]

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(driver, "serve_model", interrupted)
    assert main(["serve", "m"]) == 130
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines() == [
        "congruent serve: error: interrupted while starting: m's versions this start placed are deleted"
    ]
