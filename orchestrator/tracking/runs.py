"""The MLflow runs of a pipeline: one run per pipeline, nested runs per trained model and for the
evaluation, the whole spec as params, per-epoch metrics, and the run's end state (FINISHED, FAILED
with the traceback in error.log, KILLED on Ctrl-C or when its driver died)."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import socket
import subprocess
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import mlflow
import yaml
from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunTag

from orchestrator.tracking.store import experiment_id
from orchestrator.tracking.tags import (
    BCWI_ALPHA,
    CODE_VERSION,
    DRIVER_HOST,
    DRIVER_PID,
    ENDED_BY,
    PARENT_RUN,
    RUN_NAME,
    SPEC_FILE,
    SPEC_HASH,
    SYSTEM_PREFIX,
    TEMPORARY_TAG,
    TRAINED_HOST,
    TRAINED_NODE,
    TRAINED_PID,
)
from pipelines.spec import UpdateSpec

if TYPE_CHECKING:
    from workers.tasks.records import TrainRecord


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
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, cwd=Path(__file__).resolve().parent
        )
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
        f"{SYSTEM_PREFIX}python": platform.python_version(),
        f"{SYSTEM_PREFIX}platform": platform.platform(),
        f"{SYSTEM_PREFIX}cpus": str(os.cpu_count()),
        f"{SYSTEM_PREFIX}torch": torch.__version__,
        f"{SYSTEM_PREFIX}ray": ray.__version__,
        f"{SYSTEM_PREFIX}mlflow": mlflow.__version__,
        f"{SYSTEM_PREFIX}cuda": str(torch.cuda.is_available()),
    }


def log_spec(run_id: str, spec: UpdateSpec) -> None:
    """The whole spec as params and as spec.yaml, plus spec hash, code version, system information
    and the driver process (host and pid, for `close_orphaned_runs`) as tags."""
    params = [Param(k, v[:6000]) for k, v in flatten("", spec.model_dump(mode="json")).items()]
    tags = {
        SPEC_HASH: spec.spec_hash,
        CODE_VERSION: code_version(),
        **system_tags(),
        DRIVER_HOST: socket.gethostname(),
        DRIVER_PID: str(os.getpid()),
    }
    client = MlflowClient()
    client.log_batch(run_id, params=params, tags=[RunTag(k, v) for k, v in tags.items()])
    client.log_text(run_id, yaml.safe_dump(logged_document(spec), sort_keys=False), SPEC_FILE)


def logged_document(spec: UpdateSpec) -> dict:
    """The spec as spec.yaml keeps it: every field, but of `data` only those the spec set — a dump
    that named every column would read back as a folder of table shards (DataSpec.inferred_modality),
    and an image folder's version as text data."""
    document = spec.model_dump(mode="json")
    document["data"] = spec.data.model_dump(mode="json", exclude_unset=True)
    return document


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def record_temporary(uri: str) -> None:
    """Note on the active run a storage folder (local or s3://) that exists only while the run does:
    if its driver is killed before it deletes the folder, the next run of the spec does."""
    run = mlflow.active_run()
    assert run is not None, "record_temporary needs an active MLflow run"
    listed = json.loads(MlflowClient().get_run(run.info.run_id).data.tags.get(TEMPORARY_TAG, "[]"))
    mlflow.set_tag(TEMPORARY_TAG, json.dumps([*listed, uri]))


def temporary_root(spec: UpdateSpec) -> str:
    """Where a run of `spec` keeps folders that live only while it does (`record_temporary`): the
    only place `remove_leftovers` deletes from."""
    from workers import storage

    return storage.join(spec.storage, spec.model, spec.version, "tmp")


def remove_leftovers(run_id: str, pid: str, root: str) -> str | None:
    """Delete the temporary folders the dead run `run_id` recorded, those under `root` only (its
    tag is anyone's to write: a folder elsewhere is named and left); one line saying what went."""
    from workers import storage

    try:
        folders = json.loads(MlflowClient().get_run(run_id).data.tags.get(TEMPORARY_TAG, "[]"))
    except ValueError:
        folders = []
    folders = folders if isinstance(folders, list) else [folders]
    inside = [uri for uri in folders if isinstance(uri, str) and storage.is_under(uri, root)]
    outside = [str(uri) for uri in folders if str(uri) not in inside]
    removed = {uri: storage.delete_tree(uri) for uri in inside}
    lines = []
    if any(removed.values()):
        where = ", ".join(f"{uri} ({count} files)" for uri, count in removed.items() if count)
        lines.append(f"removed what the interrupted run {run_id[:8]} (driver {pid} died) left: {where}")
    if outside:
        lines.append(f"left alone what run {run_id[:8]} listed outside {root}: {', '.join(outside)}")
    return "; ".join(lines) or None


def close_orphaned_runs(
    experiment: str, spec_hash: str, root: str, say: Callable[[str], None] | None = None
) -> list[str]:
    """Runs of the spec `spec_hash` left RUNNING by a driver that died on this host (SIGKILL, a
    lost machine) are marked KILLED, with their nested runs, and tagged `ended_by`, and the
    temporary folders they recorded under `root` are deleted (`say` gets one line about it);
    returns their ids.
    Runs whose driver is alive, or ran on another host, are left alone."""
    client = MlflowClient()
    host = socket.gethostname()
    closed = []
    for run in client.search_runs([experiment], f"tags.{SPEC_HASH} = '{spec_hash}' and attributes.status = 'RUNNING'"):
        pid = run.data.tags.get(DRIVER_PID, "")
        if run.data.tags.get(DRIVER_HOST) != host or not pid.isdigit() or _process_alive(int(pid)):
            continue
        children = client.search_runs(
            [experiment], f"tags.{PARENT_RUN} = '{run.info.run_id}' and attributes.status = 'RUNNING'"
        )
        for orphan in [*children, run]:
            client.set_tag(orphan.info.run_id, ENDED_BY, f"a rerun of spec {spec_hash}: driver {pid} had died")
            client.set_terminated(orphan.info.run_id, "KILLED")
        closed.append(run.info.run_id)
        line = remove_leftovers(run.info.run_id, pid, root)
        if line is not None and say is not None:
            say(line)
    return closed


def log_history(run_id: str, history: list[dict[str, Any]]) -> None:
    """Per-epoch statistics of a training as metrics with step = epoch, in one batch call (the
    client splits it where the server's limits require)."""
    now = int(time.time() * 1000)
    metrics = [
        Metric(key, float(value), now, int(row["epoch"]))
        for row in history
        for key, value in row.items()
        if key != "epoch" and value is not None
    ]
    MlflowClient().log_batch(run_id, metrics=metrics)


def log_training(name: str, record: TrainRecord, extra_params: Mapping[str, Any] | None = None) -> None:
    """A nested run for one trained model: its seed, the TrainConfig it ran with (`train.*`: the
    precision and compile mode applied, its device and threads), its parameter counts
    (`parameters.total`, `parameters.trainable`), where it ran, its per-epoch metrics."""
    with mlflow.start_run(run_name=name, nested=True) as run:
        params = {
            "seed": record.seed,
            "checkpoint": record.checkpoint,
            **{f"train.{k}": v for k, v in record.config.items() if k != "seed"},
            **{f"parameters.{k}": v for k, v in record.parameters.items()},
            **(extra_params or {}),
        }
        tags = {TRAINED_PID: record.pid, TRAINED_HOST: record.host, TRAINED_NODE: record.node_id}
        MlflowClient().log_batch(
            run.info.run_id,
            metrics=[Metric("seconds", float(record.seconds), int(time.time() * 1000), 0)],
            params=[Param(k, str(v)) for k, v in params.items()],
            tags=[RunTag(k, str(v)) for k, v in tags.items() if v is not None],
        )
        log_history(run.info.run_id, record.history)


def log_metrics(prefix: str, values: Mapping[str, Any]) -> None:
    """Flat numeric metrics of the active run in one call; undefined (None) values are skipped."""
    now = int(time.time() * 1000)
    metrics = [
        Metric(f"{prefix}{k}", float(v), now, 0)
        for k, v in values.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool)
    ]
    run = mlflow.active_run()
    assert run is not None, "log_metrics needs an active MLflow run"
    MlflowClient().log_batch(run.info.run_id, metrics=metrics)


def _log_comparisons(metrics: Mapping[str, Any]) -> None:
    log_metrics("", {"error_rate": metrics["error_rate"]})
    for key in ("vs_old", "vs_paragon", "paragon_vs_old"):
        if key in metrics:
            log_metrics(f"{key}.", metrics[key])


def log_evaluation(metrics: Mapping[str, Any], predictions: Path) -> None:
    """Every comparison (error_rate, vs_old.*, vs_paragon.*, paragon_vs_old.*) on the pipeline's
    run, where the MLflow UI sorts and filters pipelines by them, and in a nested `evaluation` run
    with the prediction files."""
    _log_comparisons(metrics)
    with mlflow.start_run(run_name="evaluation", nested=True):
        _log_comparisons(metrics)
        mlflow.log_artifacts(str(predictions), "predictions")


def log_text(text: str, artifact_file: str) -> None:
    """One text artifact of the active run, at `artifact_file` (a path inside the run's artifacts)."""
    mlflow.log_text(text, artifact_file)


def log_file(path: Path, folder: str | None = None) -> None:
    """One artifact of the active run, under `folder`."""
    mlflow.log_artifact(str(path), folder)


def log_bcwi(alpha: float, sweep: list[dict[str, float]], held_out: dict[str, float] | None = None) -> None:
    """BCWI's pick as a tag, its val sweep as metrics, one step per α tried, and the pick's
    cross-fitted val figures as bcwi.held_out_val_error_rate / _nfr."""
    mlflow.set_tag(BCWI_ALPHA, str(alpha))
    if held_out is not None:
        mlflow.log_metrics({f"bcwi.held_out_val_{k}": v for k, v in held_out.items()})
    for step, row in enumerate(sweep):
        mlflow.log_metrics(
            {"bcwi.alpha": row["alpha"], "bcwi.val_error_rate": row["error_rate"], "bcwi.val_nfr": row["nfr"]},
            step=step,
        )


@contextlib.contextmanager
def pipeline_run(
    spec: UpdateSpec, run_name: str | None = None, say: Callable[[str], None] | None = None
) -> Iterator[str]:
    """The MLflow run of one pipeline (its id): the experiment named after the model, a run left
    RUNNING by a dead driver of the same spec closed first (and its temporary folders deleted,
    `say` told in one line), the spec logged; FAILED with the traceback in error.log if anything
    raises inside, KILLED (nested runs too) on Ctrl-C."""
    experiment = experiment_id(spec.model)
    mlflow.set_experiment(experiment_id=experiment)  # nested runs follow it
    close_orphaned_runs(experiment, spec.spec_hash, temporary_root(spec), say)
    with mlflow.start_run(run_name=run_name or spec.version) as run:
        log_spec(run.info.run_id, spec)
        try:
            yield run.info.run_id
        except KeyboardInterrupt:
            while mlflow.active_run() is not None:
                mlflow.end_run("KILLED")
            raise
        except Exception:
            mlflow.log_text(traceback.format_exc(), "error.log")
            raise


def set_tags(tags: Mapping[str, str]) -> None:
    """Tags of the active run."""
    mlflow.set_tags(dict(tags))


def log_params(params: Mapping[str, str]) -> None:
    """Params of the active run beside the spec's: what the driver resolved from it (the
    augmentation applied: `augment.crop`, `augment.flip`)."""
    mlflow.log_params(dict(params))


def log_trial(name: str, params: Mapping[str, Any], metrics: Mapping[str, Any]) -> None:
    """A nested run for one search trial: its configuration as params, its scores as metrics."""
    with mlflow.start_run(run_name=name, nested=True):
        mlflow.log_params(dict(params))
        log_metrics("", metrics)


def evaluated_points(model: str, registered: dict[str, str]) -> list[dict[str, Any]]:
    """One {label, method, error_rate, nfr, version} per run of the model's experiment that was
    evaluated against an old model: pipelines (vs_old.nfr), their paragon, Tune trials (nfr)."""
    client = MlflowClient()
    experiment = client.get_experiment_by_name(model)
    if experiment is None:
        return []
    runs = client.search_runs([experiment.experiment_id], max_results=5000)
    by_id = {run.info.run_id: run for run in runs}
    points = []
    for run in runs:
        metrics = run.data.metrics
        nfr = metrics.get("vs_old.nfr", metrics.get("nfr"))
        if "error_rate" not in metrics or nfr is None:
            continue
        parent = by_id.get(run.data.tags.get(PARENT_RUN, ""), run)
        if parent is not run and run.info.run_name == "evaluation" and "error_rate" in parent.data.metrics:
            continue  # the pipeline's own run carries the same numbers (runs older than that only the child)
        label = parent.data.tags.get(RUN_NAME, parent.info.run_id[:8])
        if parent is not run and run.data.params:  # a Tune trial logs its configuration
            label += " " + ", ".join(f"{k}={v}" for k, v in sorted(run.data.params.items()))
        points.append(
            {
                "label": label,
                "method": parent.data.params.get("method.name", "?"),
                "error_rate": metrics["error_rate"],
                "nfr": nfr,
                "version": registered.get(parent.info.run_id),
            }
        )
        if "paragon_vs_old.nfr" in metrics:  # the replicas' ensemble, evaluated beside the student
            points.append(
                {
                    "label": f"{label} paragon",
                    "method": "ensemble",
                    "version": None,
                    "error_rate": metrics["paragon_vs_old.er_new"],
                    "nfr": metrics["paragon_vs_old.nfr"],
                }
            )
    return sorted(points, key=lambda p: (p["method"], p["label"]))


def spec_of(run_id: str) -> UpdateSpec:
    """The spec a run logged (its spec.yaml artifact)."""
    import tempfile

    from pipelines.spec import load_spec

    with tempfile.TemporaryDirectory() as tmp:
        return load_spec(MlflowClient().download_artifacts(run_id, SPEC_FILE, tmp))


def attach(run_id: str, path: Path, artifact_path: str) -> None:
    """Log the file at `path` to run `run_id` (it need not be active) as `artifact_path`."""
    import shutil
    import tempfile

    folder, _, name = artifact_path.rpartition("/")
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp, name)
        shutil.copyfile(path, copy)
        MlflowClient().log_artifact(run_id, str(copy), folder or None)
