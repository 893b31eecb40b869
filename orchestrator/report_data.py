"""What `congruent report MODEL` shows, gathered from the MLflow registry and tracking store.

The version chain (registry tags), the pairwise NFR matrix (from the ledgers), one ER–NFR point per
evaluated run of the model's experiment (pipelines and Tune trials), and the flip explorer: the
negative flips of the latest version against its parent, with the eval images when the data of the
version's spec is available here and has the same fingerprint.
"""

from __future__ import annotations

import base64
import io
import tempfile
from dataclasses import dataclass, field
from typing import Any

import numpy as np

MAX_FLIPS_SHOWN = 60


@dataclass(frozen=True)
class Flip:
    """One negative flip: the old version was right, the new one is wrong."""

    index: int  # position in the regression-eval split
    label: str
    old_class: str
    old_confidence: float  # softmax over the ledger's top-k logits
    new_class: str
    new_confidence: float
    thumbnail: str | None = None  # base64 PNG


@dataclass
class ReportData:
    model: str
    chain: list[dict[str, Any]]
    matrix_versions: list[str]
    matrix: list[list[float]]
    points: list[dict[str, Any]]
    latest: str
    parent: str | None = None
    n_eval: int = 0
    n_flips: int = 0
    flips: list[Flip] = field(default_factory=list)
    per_class: list[tuple[str, float]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def top1_confidence(topk_values: np.ndarray) -> np.ndarray:
    """p(ŷ) = softmax(top-k logits)[0] per row: the predicted class's probability, with the mass
    of the classes outside the top k ignored (an upper bound, tight when they are small)."""
    shifted = topk_values - topk_values.max(axis=1, keepdims=True)
    weights = np.exp(shifted)
    return weights[:, 0] / weights.sum(axis=1)


def png_thumbnail(image: np.ndarray, scale: int = 3) -> str:
    """A C×H×W uint8 image as a base64 PNG, `scale`× larger (nearest neighbour)."""
    from PIL import Image

    pixels = image[0] if image.shape[0] == 1 else np.transpose(image, (1, 2, 0))
    picture = Image.fromarray(np.ascontiguousarray(pixels))
    picture = picture.resize((picture.width * scale, picture.height * scale), Image.NEAREST)
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def evaluated_points(model: str, registered: dict[str, str]) -> list[dict[str, Any]]:
    """One {label, method, error_rate, nfr, version} per run of the model's experiment that was
    evaluated against an old model: pipelines (vs_old.nfr), their paragon, Tune trials (nfr)."""
    from mlflow import MlflowClient

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
        parent = by_id.get(run.data.tags.get("mlflow.parentRunId", ""), run)
        label = parent.data.tags.get("mlflow.runName", parent.info.run_id[:8])
        if run.data.params:  # a Tune trial logs its configuration
            label += " " + ", ".join(f"{k}={v}" for k, v in sorted(run.data.params.items()))
        points.append({"label": label, "method": parent.data.params.get("method.name", "?"),
                       "error_rate": metrics["error_rate"], "nfr": nfr,
                       "version": registered.get(parent.info.run_id)})
        if "paragon_vs_old.nfr" in metrics:  # the replicas' ensemble, evaluated beside the student
            points.append({"label": f"{label} paragon", "method": "ensemble", "version": None,
                           "error_rate": metrics["paragon_vs_old.er_new"], "nfr": metrics["paragon_vs_old.nfr"]})
    return sorted(points, key=lambda p: (p["method"], p["label"]))


def eval_images(run_id: str, fingerprint: str) -> tuple[Any | None, str | None]:
    """The eval split of the version's spec (run artifact spec.yaml) if it loads here with the
    same fingerprint; else (None, why)."""
    from mlflow import MlflowClient

    from orchestrator.pipeline import data_request
    from pipelines.spec import load_spec
    from workers.stages import cached_splits

    try:
        with tempfile.TemporaryDirectory() as tmp:
            spec = load_spec(MlflowClient().download_artifacts(run_id, "spec.yaml", tmp))
        splits = cached_splits(data_request(spec))
    except Exception as e:  # noqa: BLE001 — thumbnails are optional, the flips are not
        return None, f"no thumbnails: the version's data could not be loaded here ({type(e).__name__}: {e})"
    if splits.fingerprint != fingerprint:
        return None, f"no thumbnails: the data here has fingerprint {splits.fingerprint}, the ledger {fingerprint}"
    return splits.eval, None


def flip_explorer(data: ReportData, run_id: str, new: dict[str, np.ndarray], old: dict[str, np.ndarray]) -> None:
    """Fill the flip explorer of `data` from the ledgers of the latest version and its parent."""
    from workers.metrics import negative_flips, per_class_nfr

    labels = new["labels"]
    flips = negative_flips(old["class_ids"], new["class_ids"], labels)
    images, why = eval_images(run_id, str(new["fingerprint"]))
    if why:
        data.notes.append(why)
    num_classes = int(max(labels.max(), new["class_ids"].max(), old["class_ids"].max())) + 1
    names = list(images.classes) if images is not None and images.classes else [str(c) for c in range(num_classes)]
    names += [str(c) for c in range(len(names), num_classes)]
    old_conf, new_conf = top1_confidence(old["topk_values"]), top1_confidence(new["topk_values"])
    shown = flips[np.argsort(-new_conf[flips], kind="stable")][:MAX_FLIPS_SHOWN]  # most confident mistakes first
    data.n_eval, data.n_flips = int(len(labels)), int(len(flips))
    data.flips = [
        Flip(int(i), names[labels[i]], names[old["class_ids"][i]], float(old_conf[i]), names[new["class_ids"][i]],
             float(new_conf[i]), png_thumbnail(images.images[i].numpy()) if images is not None else None)
        for i in shown
    ]
    data.per_class = list(zip(names, per_class_nfr(old["class_ids"], new["class_ids"], labels, num_classes).tolist()))


def gather(model: str) -> ReportData:
    """Everything the report shows for registered model `model` (RegistryError if it has no versions)."""
    from orchestrator import registry
    from orchestrator.versions import chain

    rows = chain(model)
    if not rows:
        raise registry.RegistryError(f"{model}: no registered versions")
    latest = rows[-1]
    names, matrix = registry.chain_matrix(model, latest["fingerprint"])
    listed = {str(mv.version): mv for mv in registry.versions(model)}
    registered = {mv.run_id: version for version, mv in listed.items()}
    data = ReportData(model, rows, names, matrix, evaluated_points(model, registered), latest["version"])
    parent = latest["parent_version"]
    if parent is None:
        same_data = [r["version"] for r in rows[:-1] if r["fingerprint"] == latest["fingerprint"]]
        parent = same_data[-1] if same_data else None
        if parent is not None:
            data.notes.append(f"v{latest['version']} names no registered parent: its flips are shown against "
                              f"v{parent}, the previous version on the same eval split")
    data.parent = parent
    if parent is not None and listed[parent].tags.get("fingerprint") != latest["fingerprint"]:
        data.notes.append(f"v{parent} was evaluated on another eval split: no flips can be counted")
    elif parent is not None:
        new = registry.ledger_of(registry.Reference(model, latest["version"]))
        old = registry.ledger_of(registry.Reference(model, parent))
        flip_explorer(data, listed[latest["version"]].run_id, new, old)
    return data
