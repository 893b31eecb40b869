"""MLflow classifiers Congruent did not train (a scikit-learn pipeline, a transformers model, another
team's model): named by any model URI, loaded as a pyfunc, their answers read as class names.

`foreign_model` resolves a URI once (`models:/NAME@ALIAS` to the version it names now, so what was
scored is recorded), and says which column of a frame of texts its pyfunc reads. `PyfuncAnswers`
is the Ray Data actor that scores batches with it (`congruent predict --compare`), `answers_of` the
one reading of a pyfunc's output that the `congruent` evaluator uses too (flip_evaluator.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
import pandas as pd  # type: ignore[import-untyped]
from mlflow.exceptions import MlflowException

from orchestrator.tracking.tags import CHECKSUM_PREFIX, SPEC_HASH
from orchestrator.tracking.version_refs import RegistryError, parse_version_ref
from workers.errors import first_line

NO_CLASS = -1  # a row the model could not answer, or answered with a class the other side does not know


@dataclass(frozen=True)
class ForeignModel:
    """A model outside Congruent: the URI as given, the one it resolved to, and the column it reads."""

    given: str
    uri: str  # models:/NAME/VERSION for a registered one (an alias resolved), else as given
    column: str | None  # the one input its signature names; None: it has no signature of one column
    model_uuid: str = ""  # MLflow's id of the logged model (a folder or run rewritten under one URI differs)

    @property
    def shown(self) -> str:
        return self.uri.removeprefix("models:/")

    @property
    def folder(self) -> str:
        safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in self.shown)
        return f"mlflow-{safe}"[:120]


def is_congruent_version(text: str) -> bool:
    """Whether `text` names a registered version Congruent registered (its checkpoint's checksum and
    spec recorded on the version); False for any other model URI."""
    parsed = parse_version_ref(text)
    if parsed is None:
        return False
    name, alias, version = parsed
    client = mlflow.MlflowClient()
    try:
        mv = client.get_model_version_by_alias(name, alias) if alias else client.get_model_version(name, str(version))
    except MlflowException:
        return False
    tags = mv.tags or {}
    return f"{CHECKSUM_PREFIX}checkpoint/model.pt" in tags or SPEC_HASH in tags


def foreign_model(text: str) -> ForeignModel:
    """The model `text` names (any MLflow model URI, or NAME@ALIAS / NAME/VERSION of a registered
    model), resolved; RegistryError (one line) when MLflow cannot find it."""
    named = "://" in text or text.startswith(("models:/", "runs:/")) or Path(text).is_dir()
    uri = text if named else f"models:/{text}"
    parsed = parse_version_ref(uri)
    if parsed is not None and parsed[1] is not None:  # an alias: the version it names now
        name, alias = parsed[0], parsed[1]
        try:
            uri = f"models:/{name}/{mlflow.MlflowClient().get_model_version_by_alias(name, alias).version}"
        except MlflowException:
            raise RegistryError(f"{text}: no such registered model alias") from None
    try:
        info = mlflow.models.get_model_info(uri)
    except (MlflowException, OSError) as e:
        message = e.message if isinstance(e, MlflowException) else str(e)
        raise RegistryError(f"{text}: MLflow finds no model there ({message.splitlines()[0][:160]})") from None
    names = info.signature.inputs.input_names() if info.signature is not None else []
    return ForeignModel(text, uri, str(names[0]) if len(names) == 1 else None, str(info.model_uuid or ""))


def answers_of(output: Any, names: tuple[str, ...] | None = None) -> np.ndarray:
    """A pyfunc's answers as class names (text): Congruent's frame (its `name`, else its `class`), one
    column or a 1-D array of labels, a frame of class probabilities (the name of each row's largest
    column), or a bare 2-D array of them in the order of `names` (an sklearn model's `classes_`).
    ValueError for probabilities without class names."""
    if isinstance(output, pd.DataFrame):
        if {"class", "name", "probability"} <= set(output.columns):  # Congruent's pyfunc
            names = output["name"].astype(str).to_numpy()
            return np.where(names != "", names, output["class"].astype(str).to_numpy())
        if output.shape[1] == 1:
            return output.iloc[:, 0].astype(str).to_numpy()
        if all(pd.api.types.is_numeric_dtype(kind) for kind in output.dtypes):
            return output.columns.astype(str).to_numpy()[np.argmax(output.to_numpy(), axis=1)]
        raise ValueError(f"a frame of {output.shape[1]} columns that are not class probabilities")
    array = np.asarray(output)
    if array.ndim == 2 and array.shape[1] == 1:
        array = array[:, 0]
    if array.ndim == 2 and names is not None and len(names) == array.shape[1]:
        return np.asarray(names)[np.argmax(array, axis=1)]
    if array.ndim != 1:
        raise ValueError(f"a {array.ndim}-D array: class probabilities without class names (return a frame)")
    return array.astype(str)


def probabilities_of(output: Any, rows: int) -> np.ndarray:
    """The probability of each answer where the output gives one (Congruent's frame, a frame or an
    array of class probabilities), NaN where it gives classes only."""
    if isinstance(output, pd.DataFrame):
        if "probability" in output.columns:
            return output["probability"].to_numpy(dtype=np.float64)
        if output.shape[1] > 1 and all(pd.api.types.is_numeric_dtype(kind) for kind in output.dtypes):
            return output.to_numpy(dtype=np.float64).max(axis=1)
    array = np.asarray(output)
    if array.ndim == 2 and array.shape[1] > 1 and np.issubdtype(array.dtype, np.number):
        return array.astype(np.float64).max(axis=1)
    return np.full(rows, np.nan)


class PyfuncAnswers:
    """A Ray Data actor's callable: a foreign model's answer to every row of a batch (its "payload"
    column: texts, given to the pyfunc as the frame column `column`), as `class_KEY` (ids by
    `classes`, the names it is compared in), `probability_KEY` (NaN: it gives none) and `error_KEY`
    (a null text, or a class `classes` lacks). The model loads from `tracking_uri`'s store."""

    def __init__(self, uri: str, column: str, classes: tuple[str, ...], key: str, tracking_uri: str) -> None:
        os.environ["MLFLOW_TRACKING_URI"] = os.environ["MLFLOW_REGISTRY_URI"] = tracking_uri
        self.model = mlflow.pyfunc.load_model(uri)
        self.names = sklearn_classes(uri)
        self.column, self.key = column, key
        self.index = {name: i for i, name in enumerate(classes)}

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        payloads = batch["payload"].tolist()
        kept = [i for i, p in enumerate(payloads) if isinstance(p, str)]
        classes = np.full(len(payloads), NO_CLASS, dtype=np.int64)
        probabilities = np.full(len(payloads), np.nan)
        errors = np.array(["no input (null)"] * len(payloads), dtype=object)
        if kept:
            try:
                output = self.model.predict(pd.DataFrame({self.column: [payloads[i] for i in kept]}))
                names, shown = answers_of(output, self.names), probabilities_of(output, len(kept))
                if len(names) != len(kept):
                    raise ValueError(f"{len(names)} answers to {len(kept)} texts")
            except Exception as e:  # noqa: BLE001 — whatever a foreign model raises: each of its rows says why
                errors[kept] = f"the model could not answer: {first_line(e)}"[:300]
            else:
                for row, name, probability in zip(kept, names, shown):
                    known = self.index.get(str(name))
                    classes[row] = NO_CLASS if known is None else known
                    probabilities[row] = probability
                    lacking = f"answered {str(name)!r}, a class the compared version lacks"
                    errors[row] = "" if known is not None else lacking
        out = {key: value for key, value in batch.items() if key != "payload"}
        out |= {f"class_{self.key}": classes, f"probability_{self.key}": probabilities, f"error_{self.key}": errors}
        return {**out, "payload": batch["payload"]}


def sklearn_classes(uri: str) -> tuple[str, ...] | None:
    """The class names of a model of MLflow's sklearn flavour (its estimator's `classes_`), which its
    pyfunc's `predict_proba` answers in; None for any other model."""
    if "sklearn" not in mlflow.models.get_model_info(uri).flavors:
        return None
    classes = getattr(mlflow.sklearn.load_model(uri), "classes_", None)
    return None if classes is None else tuple(str(c) for c in classes)


def named_probabilities(output: Any, names: tuple[str, ...] | None) -> tuple[tuple[str, ...], np.ndarray]:
    """A pyfunc's output as (class names, N×C probabilities): a frame with a numeric column per class,
    or a bare 2-D array in the order of `names` (an sklearn model's `classes_`). ValueError (one line)
    for an output of classes only, or probabilities without names."""
    if isinstance(output, pd.DataFrame) and output.shape[1] > 1:
        if {"class", "name", "probability"} <= set(output.columns):
            raise ValueError("it answers one class and its probability a text (a Congruent pyfunc), not every class's")
        if all(pd.api.types.is_numeric_dtype(kind) for kind in output.dtypes):
            return tuple(str(c) for c in output.columns), output.to_numpy(dtype=np.float64)
    array = np.asarray(output)
    if array.ndim == 2 and array.shape[1] > 1 and np.issubdtype(array.dtype, np.number):
        if names is not None and len(names) == array.shape[1]:
            return names, array.astype(np.float64)
        raise ValueError(f"it answers {array.shape[1]} probabilities a text without class names (return a frame)")
    raise ValueError(
        "it answers classes only; the old model's logits need its class probabilities (log a scikit-learn "
        "model with pyfunc_predict_fn='predict_proba', or have predict return a frame of a column per class)"
    )


def probe_probabilities(
    model: ForeignModel, column: str, texts: list[str], classes: tuple[str, ...]
) -> tuple[str, ...]:
    """The class names `model` answers probabilities of, scored on a few `texts` in this process;
    ValueError (one line) for an output of classes only, or a class `classes` (the data's) lacks."""
    try:
        pyfunc = mlflow.pyfunc.load_model(model.uri)
        names = sklearn_classes(model.uri)
    except Exception as e:  # noqa: BLE001 — whatever loading a foreign model raises, in one line
        raise ValueError(f"MLflow could not load it: {first_line(e)}"[:300]) from None
    try:
        output = pyfunc.predict(pd.DataFrame({column: texts}))
    except Exception as e:  # noqa: BLE001 — whatever a foreign model raises, in one line
        raise ValueError(f"it could not answer the spec's {column!r} column: {first_line(e)}"[:300]) from None
    names, _ = named_probabilities(output, names)
    unknown = [name for name in names if name not in classes]
    if unknown:
        raise ValueError(f"its class {unknown[0]!r} is none of the data's ({', '.join(classes)})")
    return names


class PyfuncProbabilities:
    """A Ray Data actor's callable: a foreign model's class probabilities for every text of a batch
    (its "payload" column), as "probabilities" N×C in the order of `classes` (the data's; 0 for a
    class the model lacks). The model loads from `tracking_uri`'s store."""

    def __init__(self, uri: str, column: str, classes: tuple[str, ...], tracking_uri: str) -> None:
        os.environ["MLFLOW_TRACKING_URI"] = os.environ["MLFLOW_REGISTRY_URI"] = tracking_uri
        self.model = mlflow.pyfunc.load_model(uri)
        self.names = sklearn_classes(uri)
        self.column, self.classes = column, classes

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        texts = [str(text) for text in batch["payload"].tolist()]
        names, values = named_probabilities(self.model.predict(pd.DataFrame({self.column: texts})), self.names)
        if len(values) != len(texts):
            raise ValueError(f"{len(values)} answers to {len(texts)} texts")
        probabilities = np.zeros((len(texts), len(self.classes)))
        for j, name in enumerate(names):
            probabilities[:, self.classes.index(name)] = values[:, j]
        return {"payload": batch["payload"], "probabilities": probabilities}
