"""`submit --env-from-here` sends this environment's MLflow and S3 settings as a file in the job's
package, never in what the cluster shows of a job (orchestrator/jobs/credentials.py)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import yaml

from orchestrator.dataplane.objects import reader_env
from orchestrator.host import CREDENTIALS_FROM_FILE
from orchestrator.jobs import credentials, ray_jobs
from pipelines.spec import load_spec
from reliability_records import record

SECRETS = {"AWS_SECRET_ACCESS_KEY": "s3-secret-value", "MLFLOW_TRACKING_PASSWORD": "mlflow-secret-value"}


class CapturingJobs:
    """A Jobs API client that keeps what it was sent, and the package's files as they were then."""

    def __init__(self) -> None:
        self.sent: dict = {}
        self.package: dict[str, Path] = {}

    def submit_job(self, **kwargs) -> str:
        self.sent = kwargs
        folder = Path(kwargs["runtime_env"]["working_dir"])
        self.package = {p.name: p for p in folder.iterdir()}
        sent = folder / credentials.CREDENTIALS_FILE
        self.credentials = sent.read_text() if sent.exists() else "{}"
        self.mode = stat.S_IMODE(sent.stat().st_mode) if sent.exists() else None
        return "raysubmit_1"


def test_env_from_here_sends_the_settings_in_the_package_not_the_jobs_visible_state(tmp_path, monkeypatch):
    for name, value in {**SECRETS, "AWS_ENDPOINT_URL_S3": "http://127.0.0.1:9000"}.items():
        monkeypatch.setenv(name, value)
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump({"model": "m", "version": "v1", "arch": "mlp-small"}))
    jobs = CapturingJobs()
    monkeypatch.setattr(ray_jobs, "client", lambda address: jobs)
    ray_jobs.submit(load_spec(spec_path), spec_path, "http://127.0.0.1:8265", env_from_here=True)
    visible = repr({k: v for k, v in jobs.sent.items()})  # entrypoint, runtime_env, metadata
    assert not [value for value in SECRETS.values() if value in visible]  # before: in env_vars
    assert jobs.sent["runtime_env"]["worker_process_setup_hook"] == credentials.WORKER_HOOK
    assert json.loads(jobs.credentials)["AWS_SECRET_ACCESS_KEY"] == "s3-secret-value"
    assert jobs.mode == 0o600
    assert credentials.CREDENTIALS_FILE in jobs.sent["entrypoint"]  # the driver takes its copy along
    record("security", check="submit --env-from-here: no secret in the job's runtime_env or entrypoint", passed=True)


def test_a_jobs_driver_and_workers_load_the_file_and_tasks_are_given_no_secret(tmp_path, monkeypatch):
    for name in [*SECRETS, CREDENTIALS_FROM_FILE]:  # set, then removed: restored (absent) after the test
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    credentials.write_credentials(tmp_path, SECRETS)
    monkeypatch.chdir(tmp_path)
    credentials.load_into_worker()  # a worker: reads the package's file, leaves it for the others
    assert os.environ["AWS_SECRET_ACCESS_KEY"] == "s3-secret-value"
    assert (tmp_path / credentials.CREDENTIALS_FILE).exists()
    assert reader_env() == {}  # a reading task's runtime_env carries nothing: its worker loads the file
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    assert credentials.load_into_driver(tmp_path)  # the driver's own copy: loaded, then deleted
    assert os.environ["MLFLOW_TRACKING_PASSWORD"] == "mlflow-secret-value"
    assert not (tmp_path / credentials.CREDENTIALS_FILE).exists()
    assert not credentials.load_into_driver(tmp_path)  # a job sent without settings: nothing to load
