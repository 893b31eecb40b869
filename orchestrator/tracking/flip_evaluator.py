"""`congruent`, an evaluator for `mlflow.models.evaluate`: the flips of any MLflow classifier against
a baseline model, where MLflow users already evaluate (registered under MLflow's
`mlflow.model_evaluator` entry point in pyproject.toml).

    result = mlflow.models.evaluate(
        model="models:/tickets/2", data=frame, targets="label", model_type="classifier",
        evaluators=["congruent"],
        evaluator_config={"congruent": {"baseline": "models:/tickets@champion", "slice_columns": ["channel"]}},
    )
    mlflow.validate_evaluation_results({"nfr": MetricThreshold(threshold=0.02, greater_is_better=False)}, result)

Both models answer the dataset's features (their pyfunc: Congruent's frame of class, name and
probability; labels, as a scikit-learn pipeline's `predict`; or class probabilities, a frame whose
columns are the class names); answers and labels are compared as class names. Logged to the run:
`error_rate`, `baseline_error_rate`, `nfr`, `pfr`, `rel_nfr` (where defined), `nfr_upper` (the NFR's
one-sided Wilson upper bound at `confidence`), `negative_flips`, `positive_flips`, `n`, each slice's
`slice/COLUMN/VALUE/nfr` and `.../n`, and the flipped samples as `congruent_flips.csv`.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
import pandas as pd  # type: ignore[import-untyped]
from mlflow.exceptions import MlflowException
from mlflow.models.evaluation.artifacts import CsvEvaluationArtifact
from mlflow.models.evaluation.base import EvaluationResult, ModelEvaluator
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orchestrator.tracking.foreign_models import answers_of, sklearn_classes
from workers.confidence import wilson_upper
from workers.metrics import FlipCounts

NAME = "congruent"
FLIPS_FILE = "congruent_flips.csv"
UNSAFE = re.compile(r"[^A-Za-z0-9_.\- ]")  # what an MLflow metric name may not hold, in a slice's value


class EvaluatorConfig(BaseModel):
    """`evaluator_config={"congruent": {...}}`."""

    model_config = ConfigDict(extra="forbid")

    baseline: str = Field(description="the model the flips are counted against: any MLflow model URI")
    slice_columns: list[str] = Field(default_factory=list, description="dataset columns whose values slice the NFR")
    confidence: float = Field(0.95, gt=0.5, lt=1.0, description="of the NFR's upper bound (`nfr_upper`)")


def flip_metrics(counts: FlipCounts, confidence: float) -> dict[str, float]:
    """The counts as the run's metrics (module docstring); rel_nfr only where defined."""
    report = counts.report()
    metrics = {
        "n": float(counts.n),
        "error_rate": report["er_new"],
        "baseline_error_rate": report["er_old"],
        "nfr": report["nfr"],
        "pfr": report["pfr"],
        "nfr_upper": wilson_upper(counts.negative, counts.n, confidence),
        "negative_flips": float(counts.negative),
        "positive_flips": float(counts.positive),
    }
    return metrics | ({"rel_nfr": report["rel_nfr"]} if report["rel_nfr"] is not None else {})


def slice_metrics(
    baseline: np.ndarray, new: np.ndarray, labels: np.ndarray, columns: dict[str, pd.Series]
) -> dict[str, float]:
    """Each slice's NFR and size, `slice/COLUMN/VALUE/nfr` and `.../n` (counted on its samples alone)."""
    metrics: dict[str, float] = {}
    for column, values in columns.items():
        shown = values.astype(str).to_numpy()
        for value in sorted(set(shown)):
            inside = shown == value
            counts = FlipCounts.of_names(baseline[inside], new[inside], labels[inside])
            name = f"slice/{UNSAFE.sub('_', column)}/{UNSAFE.sub('_', value)}"
            metrics |= {f"{name}/nfr": counts.negative / counts.n, f"{name}/n": float(counts.n)}
    return metrics


def flip_table(baseline: np.ndarray, new: np.ndarray, labels: np.ndarray, features: pd.DataFrame) -> pd.DataFrame:
    """The flipped samples: their row in the dataset, label, both answers, the flip's kind, and the
    features (the inputs a reader needs to see why)."""
    negative = (baseline == labels) & (new != labels)
    positive = (baseline != labels) & (new == labels)
    flipped = negative | positive
    table = pd.DataFrame(
        {
            "row": np.flatnonzero(flipped),
            "label": labels[flipped],
            "baseline": baseline[flipped],
            "new": new[flipped],
            "flip": np.where(negative[flipped], "negative", "positive"),
        }
    )
    return pd.concat([table, features.iloc[np.flatnonzero(flipped)].reset_index(drop=True)], axis=1)


class CongruentEvaluator(ModelEvaluator):
    """The `congruent` evaluator (module docstring)."""

    @classmethod
    def can_evaluate(cls, *, model_type: str, evaluator_config: dict[str, Any], **kwargs: Any) -> bool:
        return model_type == "classifier"

    def evaluate(  # MLflow's signature, keyword-only
        self,
        *,
        model_type: str,
        dataset: Any,
        run_id: str,
        evaluator_config: dict[str, Any],
        model: Any = None,
        **kwargs: Any,
    ) -> EvaluationResult:
        try:
            config = EvaluatorConfig.model_validate(evaluator_config or {})
        except ValidationError as e:
            where = ".".join(str(p) for p in e.errors()[0]["loc"]) or "config"
            raise MlflowException(f"congruent evaluator: {where}: {e.errors()[0]['msg']}") from None
        if dataset.labels_data is None:
            raise MlflowException("congruent evaluator: give targets= (the labels the flips are counted against)")
        features: pd.DataFrame = dataset.features_data
        missing = [c for c in config.slice_columns if c not in features.columns]
        if missing:
            raise MlflowException(f"congruent evaluator: slice_columns {missing} are not columns of the data")
        labels = np.asarray(dataset.labels_data).astype(str)
        try:
            baseline_model = mlflow.pyfunc.load_model(config.baseline)
        except MlflowException as e:
            raise MlflowException(f"congruent evaluator: baseline {config.baseline}: {e.message}") from None
        try:
            new = answers_of(model.predict(features) if model is not None else dataset.predictions_data)
            baseline = answers_of(baseline_model.predict(features), sklearn_classes(config.baseline))
        except ValueError as e:
            raise MlflowException(f"congruent evaluator: a model's answers cannot be read as classes: {e}") from None
        counts = FlipCounts.of_names(baseline, new, labels)
        metrics = flip_metrics(counts, config.confidence)
        metrics |= slice_metrics(baseline, new, labels, {c: features[c] for c in config.slice_columns})
        client = mlflow.MlflowClient()
        for key, value in metrics.items():
            client.log_metric(run_id, key, value)
        table = flip_table(baseline, new, labels, features)
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder, FLIPS_FILE)
            table.to_csv(path, index=False)
            client.log_artifact(run_id, str(path))
        uri = mlflow.get_run(run_id).info.artifact_uri.rstrip("/") + f"/{FLIPS_FILE}"
        return EvaluationResult(metrics, {"congruent_flips": CsvEvaluationArtifact(uri, table)}, run_id)
