"""MLflow tracking for update pipelines: one run per pipeline, nested runs per stage.

All MLflow calls of a pipeline run sit here and in registry.py; stages and workers never import
MLflow. With no configuration the store is embedded: `sqlite:///<cwd>/mlflow.db` with artifacts
under `<cwd>/mlruns`; `MLFLOW_TRACKING_URI` points the same code at a server.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import socket
import subprocess
import time
import traceback
from pathlib import Path
from typing import Any

import mlflow
from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunTag

from pipelines.spec import UpdateSpec

MAX_BATCH = 1000  # MLflow's limit of metrics per log_batch call


# MLflow's HTTP client retries connection errors and 429/5xx answers with backoff
# factor·2^(n−1) s: 0, 2, 4, 8, 16, 32 s here, so a server restart of up to a minute is survived
# and an unreachable server fails after about 62 s (plus the timeouts), not after MLflow's default
# of about four minutes. Values already in the environment win.
HTTP_RETRY_POLICY = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "6",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_JITTER": "0.5",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "30",
}


class TrackingUnavailable(RuntimeError):
    """The tracking store cannot be reached; the message is one line."""


def bounded_http_retries() -> None:
    for key, value in HTTP_RETRY_POLICY.items():
        os.environ.setdefault(key, value)


def configure() -> str:
    """Point MLflow at `MLFLOW_TRACKING_URI`, else at the embedded sqlite store in the working
    directory (created here, in the driver, before anything else touches it), with the bounded
    retry policy above."""
    bounded_http_retries()
    uri = os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path.cwd() / 'mlflow.db'}"
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    MlflowClient().search_experiments(max_results=1)  # creates the sqlite schema once
    return uri


def check_store() -> str:
    """`configure()`, raising TrackingUnavailable (one line) when the store does not answer."""
    from mlflow.exceptions import MlflowException

    try:
        return configure()
    except MlflowException as e:
        uri = os.environ.get("MLFLOW_TRACKING_URI", "")
        retries = os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"]
        text = str(e).strip()
        errno = re.search(r"\[Errno -?\d+\] [^'\")]+", text)  # "[Errno 111] Connection refused"
        reason = errno.group(0) if errno else (text.splitlines() or [type(e).__name__])[0][:200]
        raise TrackingUnavailable(f"MLflow tracking store {uri} did not answer after {retries} retries "
                                  f"({reason})") from None


def experiment_id(name: str) -> str:
    """The experiment `name`, created if missing; with the embedded sqlite store its artifacts go
    to `mlruns/` beside the database file."""
    client = MlflowClient()
    existing = client.get_experiment_by_name(name)
    if existing is not None:
        return existing.experiment_id
    uri = mlflow.get_tracking_uri()
    location = None
    if uri.startswith("sqlite:///"):
        location = (Path(uri.removeprefix("sqlite:///")).parent / "mlruns").resolve().as_uri()
    return client.create_experiment(name, artifact_location=location)


def flatten(prefix: str, value: Any) -> dict[str, str]:
    """{"method.alpha": "0.8", ...} from nested dicts; lists and None as JSON."""
    if isinstance(value, dict):
        out: dict[str, str] = {}
        for key, item in value.items():
            out.update(flatten(f"{prefix}.{key}" if prefix else key, item))
        return out
    return {prefix: json.dumps(value) if isinstance(value, (list, tuple)) or value is None else str(value)}


def code_version() -> str:
    """The git commit of the project checkout, else the installed package version."""
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent)
        if sha.returncode == 0:
            return sha.stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        pass
    from importlib.metadata import version

    return f"congruent-{version('congruent')}"


def system_tags() -> dict[str, str]:
    import ray
    import torch

    return {
        "system.python": platform.python_version(), "system.platform": platform.platform(),
        "system.cpus": str(os.cpu_count()), "system.torch": torch.__version__, "system.ray": ray.__version__,
        "system.mlflow": mlflow.__version__, "system.cuda": str(torch.cuda.is_available()),
    }


def log_spec(run_id: str, spec: UpdateSpec) -> None:
    """The whole spec as params, plus spec hash, code version, system information and the driver
    process (host and pid, for `close_orphaned_runs`) as tags."""
    params = [Param(k, v[:6000]) for k, v in flatten("", spec.model_dump(mode="json")).items()]
    tags = {"spec_hash": spec.spec_hash, "code_version": code_version(), **system_tags(),
            "driver.host": socket.gethostname(), "driver.pid": str(os.getpid())}
    client = MlflowClient()
    for start in range(0, len(params), 100):
        client.log_batch(run_id, params=params[start : start + 100])
    client.log_batch(run_id, tags=[RunTag(k, v) for k, v in tags.items()])


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def close_orphaned_runs(experiment: str, spec_hash: str) -> list[str]:
    """Runs of the spec `spec_hash` left RUNNING by a driver that died on this host (SIGKILL, a
    lost machine) are marked KILLED, with their nested runs, and tagged `ended_by`; returns their
    ids. Runs whose driver is alive, or ran on another host, are left alone."""
    client = MlflowClient()
    host = socket.gethostname()
    closed = []
    for run in client.search_runs([experiment], f"tags.spec_hash = '{spec_hash}' and attributes.status = 'RUNNING'"):
        pid = run.data.tags.get("driver.pid", "")
        if run.data.tags.get("driver.host") != host or not pid.isdigit() or _process_alive(int(pid)):
            continue
        children = client.search_runs([experiment], f"tags.mlflow.parentRunId = '{run.info.run_id}' "
                                                    "and attributes.status = 'RUNNING'")
        for orphan in [*children, run]:
            client.set_tag(orphan.info.run_id, "ended_by", f"a rerun of spec {spec_hash}: driver {pid} had died")
            client.set_terminated(orphan.info.run_id, "KILLED")
        closed.append(run.info.run_id)
    return closed


def log_history(run_id: str, history: list[dict[str, Any]]) -> None:
    """Per-epoch statistics of a training record as metrics with step = epoch, in batches."""
    now = int(time.time() * 1000)
    metrics = [
        Metric(key, float(value), now, int(row["epoch"]))
        for row in history for key, value in row.items()
        if key != "epoch" and value is not None
    ]
    client = MlflowClient()
    for start in range(0, len(metrics), MAX_BATCH):
        client.log_batch(run_id, metrics=metrics[start : start + MAX_BATCH])


def log_stage(name: str, record: dict[str, Any], extra_params: dict[str, Any] | None = None) -> None:
    """A nested run for one trained model: its seed, where it ran, its per-epoch metrics."""
    with mlflow.start_run(run_name=name, nested=True) as run:
        params = {"seed": record["seed"], "checkpoint": record["checkpoint"], **(extra_params or {})}
        tags = {"pid": record.get("pid"), "host": record.get("host"), "node_id": record.get("node_id")}
        client = MlflowClient()
        client.log_batch(
            run.info.run_id,
            metrics=[Metric("seconds", float(record["seconds"]), int(time.time() * 1000), 0)],
            params=[Param(k, str(v)) for k, v in params.items()],
            tags=[RunTag(k, str(v)) for k, v in tags.items() if v is not None],
        )
        log_history(run.info.run_id, record["history"])


@contextlib.contextmanager
def killed_on_interrupt():
    """On Ctrl-C, end the active runs (nested ones first) as KILLED rather than FAILED, re-raise."""
    try:
        yield
    except KeyboardInterrupt:
        while mlflow.active_run() is not None:
            mlflow.end_run("KILLED")
        raise


@contextlib.contextmanager
def traceback_on_failure():
    """Attach the traceback of whatever fails inside to the active run (`error.log`), re-raise."""
    try:
        yield
    except Exception:
        mlflow.log_text(traceback.format_exc(), "error.log")
        raise


def log_metrics(prefix: str, values: dict[str, Any]) -> None:
    """Flat numeric metrics of the active run in one call; undefined (None) values are skipped."""
    now = int(time.time() * 1000)
    metrics = [Metric(f"{prefix}{k}", float(v), now, 0) for k, v in values.items() if isinstance(v, (int, float))]
    MlflowClient().log_batch(mlflow.active_run().info.run_id, metrics=metrics)
