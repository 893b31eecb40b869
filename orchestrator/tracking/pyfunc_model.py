"""A registered version as an MLflow pyfunc model on raw inputs (MLflow's "models from code": this
file is the model's code, logged with the version; no pickle of a module).

`mlflow.pyfunc.load_model("models:/MODEL@champion")` reads the version's weights-only checkpoint
(artifact `checkpoint`, checked against the sha256 the registry's version tag recorded when it was
registered; refused without one) with its own
tokenizer or image description (workers/models/raw_inputs.py, what `congruent serve` answers with),
and `predict` takes a DataFrame: for a text model the texts in the column the version was trained
on (`input_column`, e.g. `text`), for an image model encoded image bytes or paths to image files
(column `image`): the signature names that column, so MLflow refuses a DataFrame without it before
`predict` runs. It returns, per row, `class` (the class id), `name` (the class name, where the
version knows them) and `probability`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlflow
import pandas as pd  # type: ignore[import-untyped]
from mlflow.exceptions import MlflowException
from mlflow.pyfunc import PythonModel

from orchestrator.tracking.tags import CHECKSUM_PREFIX
from workers.digests import file_sha256


class RawInputClassifier(PythonModel):
    """The version behind `mlflow.pyfunc` (module docstring)."""

    def load_context(self, context: Any) -> None:
        from workers.models.raw_inputs import RawInputModel

        config = context.model_config or {}
        checkpoint = context.artifacts["checkpoint"]
        recorded = registered_sha256(config.get("run_id"))
        if recorded is None:
            raise MlflowException(
                f"{checkpoint}: no registered version of run {config.get('run_id')} records its checkpoint's sha256 "
                "(tag sha256.checkpoint/model.pt): not loaded"
            )
        if file_sha256(checkpoint) != recorded:
            raise MlflowException(
                f"{checkpoint}: its sha256 is not the one the registry recorded when the version was registered "
                "(the version's artifacts changed since): not loaded"
            )
        self.model = RawInputModel(checkpoint, allow_user_factories=bool(config.get("allow_user_factories")))
        self.column = str(config.get("input_column") or ("text" if self.model.modality == "text" else "image"))

    def _payloads(self, model_input: Any) -> list[str | bytes]:
        frame = model_input if isinstance(model_input, pd.DataFrame) else pd.DataFrame(model_input)
        if self.column not in frame.columns:  # a caller that skipped MLflow's schema enforcement
            raise MlflowException(
                f"the input has no column `{self.column}` (it has {', '.join(map(str, frame.columns))})"
            )
        values = frame[self.column].tolist()
        if self.model.modality == "text":
            return ["" if v is None else str(v) for v in values]
        return [v if isinstance(v, bytes) else Path(str(v)).read_bytes() for v in values]

    def predict(self, context: Any, model_input: pd.DataFrame, params: dict[str, Any] | None = None) -> pd.DataFrame:
        from workers.errors import DataError

        try:
            answers = self.model.answer(self._payloads(model_input))
        except (DataError, OSError) as e:
            raise MlflowException(str(e)) from None
        names = self.model.class_names
        return pd.DataFrame(
            {
                "class": [a.class_id for a in answers],
                "name": [names[a.class_id] if names and a.class_id < len(names) else "" for a in answers],
                "probability": [a.probability for a in answers],
            }
        )


def registered_sha256(run_id: str | None) -> str | None:
    """The checkpoint's sha256 the registry recorded on the version registered from run `run_id`
    (its tag `sha256.checkpoint/model.pt`, written by the registering pipeline): not the copy in the
    model's own artifacts, which whoever can write them could change with the checkpoint."""
    if not run_id:
        return None
    versions = mlflow.MlflowClient().search_model_versions(f"run_id='{run_id}'")
    found = {mv.tags.get(f"{CHECKSUM_PREFIX}checkpoint/model.pt") for mv in versions} - {None}
    return found.pop() if len(found) == 1 else None


mlflow.models.set_model(RawInputClassifier())
