"""Logging a version as the MLflow pyfunc model on raw inputs that pyfunc_model.py is the code of:
its artifact, signature, input example and requirements."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import mlflow


def serving_requirements(hf_config: str | None) -> list[str]:
    """What the served model needs beside torch: transformers for an hf:DIR model (it has a config)."""
    if hf_config is None:
        return []
    from importlib.metadata import version

    return [f"transformers=={version('transformers')}"]


def log_pyfunc(
    checkpoint: Path, settings: Any, sha256: str, input_column: str, allow_user_factories: bool = False
) -> Any:
    """The version as an MLflow pyfunc model on raw inputs (pyfunc_model.py, MLflow's models from
    code) in the active run, the weights-only `checkpoint` its artifact, with a signature of named
    columns and an input example; its ModelInfo."""
    import pandas as pd  # type: ignore[import-untyped]
    import torch
    from mlflow.models import ModelSignature
    from mlflow.types import ColSpec, Schema

    text = settings.inputs.modality == "text"
    column = input_column if text else "image"
    signature = ModelSignature(
        inputs=Schema([ColSpec("string" if text else "binary", column)]),
        outputs=Schema([ColSpec("long", "class"), ColSpec("string", "name"), ColSpec("double", "probability")]),
    )
    run = mlflow.active_run()
    assert run is not None, "a version's pyfunc is logged in its pipeline's run"
    example = pd.DataFrame({column: ["an example text" if text else _blank_png(settings.inputs)]})
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        return mlflow.pyfunc.log_model(
            name="model",
            python_model=str(Path(__file__).with_name("pyfunc_model.py")),
            artifacts={"checkpoint": str(checkpoint)},
            model_config={
                "checkpoint_sha256": sha256,  # shown; the load checks the registry's tag (pyfunc_model.py)
                "run_id": run.info.run_id,  # the run its version is registered from
                "input_column": column,
                "allow_user_factories": allow_user_factories,  # the spec's own architecture, imported by name
            },
            signature=signature,
            input_example=example,
            pip_requirements=[f"torch=={torch.__version__.split('+')[0]}", *serving_requirements(settings.config)],
        )


def _blank_png(inputs: Any) -> bytes:
    """A black PNG image of the size and channels the model reads (the input example)."""
    from PIL import Image

    mode = "L" if inputs.channels == 1 else "RGB"
    out = io.BytesIO()
    Image.new(mode, (inputs.size, inputs.size)).save(out, format="PNG")
    return out.getvalue()
