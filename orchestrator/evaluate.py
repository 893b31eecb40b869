"""The last stages: BCWI's α sweep, and evaluation on the regression-eval split.

Predictions are saved as .npy logits next to the labels, so `congruent compare` reproduces every
number the pipeline prints.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from orchestrator.pipeline import StageOutputs
from pipelines.spec import UpdateSpec
from workers import storage
from workers.bcwi import interpolate_state_dicts, sweep_bcwi
from workers.checkpoints import load_model, save_checkpoint
from workers.inference import predict_logits
from workers.metrics import error_rate, negative_flip_rate, update_report
from workers.teachers import fetch_checkpoint

Say = Callable[[str], None]


def bcwi_stage(spec: UpdateSpec, out: StageOutputs, say: Say) -> None:
    """Sweep θ = α·θ_old + (1−α)·θ_new on the validation split, store the picked model."""
    old, settings = load_model(fetch_checkpoint(out.old_checkpoint))
    new, _ = load_model(fetch_checkpoint(out.model_checkpoint))
    val = out.splits.val
    old_val = predict_logits(old, val)

    def evaluate(state: dict[str, torch.Tensor]) -> tuple[float, float]:
        new.load_state_dict(state)
        logits = predict_logits(new, val)
        return error_rate(logits, val.labels), negative_flip_rate(old_val, logits, val.labels)

    fine_tuned = {k: v.clone() for k, v in new.state_dict().items()}
    alpha, table = sweep_bcwi(old.state_dict(), fine_tuned, evaluate, spec.method.bcwi_alphas,
                              spec.method.bcwi_er_tolerance)
    new.load_state_dict(interpolate_state_dicts(old.state_dict(), fine_tuned, alpha))
    picked = next(row for row in table if row["alpha"] == alpha)
    say(f"BCWI: α = {alpha} picked on the validation split (val ER {100 * picked['error_rate']:.2f} %, "
        f"val NFR {100 * picked['nfr']:.2f} %)")
    uri = storage.join(spec.storage, spec.model, spec.version, spec.spec_hash, "model-bcwi.pt")
    local = Path(fetch_checkpoint(out.model_checkpoint)).with_name("model-bcwi.pt")
    save_checkpoint(local, new, settings, bcwi_alpha=alpha)
    out.model_checkpoint = storage.upload(local, uri)
    out.bcwi = {"alpha": alpha, "sweep": table}


def evaluate_stage(spec: UpdateSpec, out: StageOutputs, run_dir: Path) -> dict[str, Any]:
    """Metrics of the result against the old version and the paragon; writes predictions/ and
    result.json under `run_dir` and returns the result record."""
    data = out.splits.eval
    labels = data.labels.numpy()
    predictions: dict[str, np.ndarray] = {}
    if out.model_checkpoint is not None:
        model, _ = load_model(fetch_checkpoint(out.model_checkpoint), spec.allow_user_factories)
        predictions["new"] = predict_logits(model, data).numpy()
    else:
        predictions["new"] = out.paragon_logits.numpy()
    if out.old_checkpoint is not None:
        old, _ = load_model(fetch_checkpoint(out.old_checkpoint), spec.allow_user_factories)
        predictions["old"] = predict_logits(old, data).numpy()
    if out.paragon_logits is not None and out.model_checkpoint is not None:
        predictions["paragon"] = out.paragon_logits.numpy()
    metrics: dict[str, Any] = {"error_rate": error_rate(predictions["new"], labels)}
    if "old" in predictions:
        metrics["vs_old"] = update_report(predictions["old"], predictions["new"], labels)
    if "paragon" in predictions:
        metrics["vs_paragon"] = update_report(predictions["paragon"], predictions["new"], labels)
        if "old" in predictions:
            metrics["paragon_vs_old"] = update_report(predictions["old"], predictions["paragon"], labels)
    folder = run_dir / "predictions"
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "labels.npy", labels)
    for name, logits in predictions.items():
        np.save(folder / f"{name}.npy", logits.astype(np.float32))
    result = {
        "model": spec.model, "version": spec.version, "method": spec.method.name, "arch": spec.arch,
        "spec_hash": spec.spec_hash, "fingerprint": out.splits.fingerprint, "n_eval": len(labels),
        "checkpoint": out.model_checkpoint, "old": out.old_checkpoint, "metrics": metrics,
        "predictions": {name: str(folder / f"{name}.npy") for name in predictions},
        "labels": str(folder / "labels.npy"), "replicas": out.replicas, "student": out.student,
        "teacher_pool": out.teacher_pool, "bcwi": out.bcwi, "seconds": out.seconds,
    }
    (run_dir / "result.json").write_text(json.dumps(result, indent=2))
    return result
