"""Publishing a pipeline's outcome to MLflow: stage runs, evaluation, ledger, registry version,
the chain's NFR matrix and the promotion gate. Called by the driver around the stages."""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
import torch
import yaml
from mlflow import MlflowClient

from orchestrator import registry, tracking
from orchestrator.pipeline import StageOutputs
from pipelines.spec import UpdateSpec
from workers.checkpoints import load_model, save_checkpoint
from workers.teachers import fetch_checkpoint


def log_stages(spec: UpdateSpec, out: StageOutputs) -> None:
    """Nested runs per replica and for the student; the pool's and BCWI's figures on the parent."""
    for record in out.replicas:
        tracking.log_stage(record["name"], record)
    if out.student is not None:
        name = "distillation" if spec.method.objective().references else "training"
        tracking.log_stage(name, out.student, {"method": spec.method.name})
    if out.teacher_pool:
        tracking.log_metrics("teacher_pool.", {k: v for k, v in out.teacher_pool.items() if k != "pids"})
    if out.bcwi:
        mlflow.set_tag("bcwi.alpha", str(out.bcwi["alpha"]))
        for step, row in enumerate(out.bcwi["sweep"]):
            mlflow.log_metrics({"bcwi.alpha": row["alpha"], "bcwi.val_error_rate": row["error_rate"],
                                "bcwi.val_nfr": row["nfr"]}, step=step)
    tracking.log_metrics("seconds.", out.seconds)


def log_evaluation(spec: UpdateSpec, result: dict[str, Any], run_dir: Path) -> Path:
    """A nested evaluation run with every comparison; the ledger and result on the parent run."""
    metrics = result["metrics"]
    with mlflow.start_run(run_name="evaluation", nested=True):
        tracking.log_metrics("", {"error_rate": metrics["error_rate"]})
        for key in ("vs_old", "vs_paragon", "paragon_vs_old"):
            if key in metrics:
                tracking.log_metrics(f"{key}.", metrics[key])
        mlflow.log_artifacts(str(run_dir / "predictions"), "predictions")
    (run_dir / "ledger").mkdir(exist_ok=True)
    ledger = registry.write_ledger(run_dir / "ledger" / "predictions.npz", np.load(result["predictions"]["new"]),
                                   np.load(result["labels"]), result["fingerprint"])
    mlflow.log_artifact(str(ledger), "ledger")
    mlflow.log_artifact(str(run_dir / "result.json"))
    mlflow.log_text(yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False), "spec.yaml")
    return ledger


def register_once(spec: UpdateSpec, result: dict[str, Any], parent: registry.Reference | None, say=print) -> str:
    """The version holding this spec's result: the one a previous run of the same spec (same spec
    hash, same eval split) registered, else a new one (see `register`)."""
    existing = registry.versions_of_spec(spec.model, spec.spec_hash, result["fingerprint"])
    if existing:
        mlflow.set_tag("reused_version", existing[0])
        say(f"{spec.model} version {existing[0]} already holds spec {spec.spec_hash}: not registered again")
        return existing[0]
    version = register(spec, result, parent)
    say(f"registered {spec.model} version {version} (alias challenger)")
    return version


def register(spec: UpdateSpec, result: dict[str, Any], parent: registry.Reference | None) -> str:
    """Register the evaluated model as a new version of `spec.model` with its lineage and flips,
    alias `challenger`; returns the version. Nothing is left registered if a step fails."""
    model, settings = load_model(fetch_checkpoint(result["checkpoint"]), spec.allow_user_factories)
    with tempfile.TemporaryDirectory() as tmp:
        clean = save_checkpoint(Path(tmp, "model.pt"), model, settings, fingerprint=result["fingerprint"])
        mlflow.log_artifact(str(clean), "checkpoint")
    example = np.zeros((1, settings.in_channels, settings.image_size, settings.image_size), np.float32)
    # the serving copy is MLflow's pickle flavour (pt2 would need torch.export of every architecture);
    # our own loads use the weights-only checkpoint above, so MLflow's warning about it is muted
    pytorch_logger = logging.getLogger("mlflow.pytorch")
    level = pytorch_logger.level
    pytorch_logger.setLevel(logging.ERROR)
    try:
        info = mlflow.pytorch.log_model(
            model.to(memory_format=torch.contiguous_format), name="model", serialization_format="pickle",
            input_example=example, pip_requirements=[f"torch=={torch.__version__.split('+')[0]}"],
        )
    finally:
        pytorch_logger.setLevel(level)
    vs_old = result["metrics"].get("vs_old", {})
    tags = {
        "method": spec.method.name, "arch": spec.arch, "label": spec.version,
        "parent_version": parent.version if parent else "", "old": spec.old or "",
        "fingerprint": result["fingerprint"], "spec_hash": spec.spec_hash,
        "error_rate": f"{result['metrics']['error_rate']:.6f}",
        **{k: ("" if vs_old.get(k) is None else f"{vs_old[k]:.6f}") for k in ("nfr", "pfr", "rel_nfr")},
    }
    registered = mlflow.register_model(info.model_uri, spec.model, tags=tags)
    version = registry.drop_duplicate_versions(spec.model, registered.run_id)  # HTTP retries may double a POST
    client = MlflowClient()
    try:
        client.set_registered_model_alias(spec.model, "challenger", version)
        names, matrix = registry.chain_matrix(spec.model, result["fingerprint"])
        with tempfile.TemporaryDirectory() as tmp:
            for path in registry.write_matrix_files(Path(tmp), [f"v{n}" for n in names], matrix,
                                                    f"{spec.model}: NFR of column vs row (%)"):
                mlflow.log_artifact(str(path))
    except BaseException:
        client.delete_model_version(spec.model, version)
        raise
    return version
