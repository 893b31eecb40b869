"""Scoring batches of raw inputs with one or two registered versions: what each actor of
`congruent predict`'s Ray Data pool runs (orchestrator/driver/predict.py). A row that cannot be
scored (no text, an image that does not decode) is answered with its error, not a failed batch."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from workers.errors import DataError, first_line
from workers.models.raw_inputs import Answer, RawInputModel

NO_CLASS = -1  # the class column of a row a version could not answer (its error says why)


def answers_or_errors(model: RawInputModel, payloads: Sequence[Any]) -> list[Answer | str]:
    """Each payload's Answer, or why it cannot be answered: no text (null), or a DataError of its
    own (an image that does not decode). A batch without a bad row costs one forward pass; one with
    a bad row is answered row by row only where the batch as a whole was refused."""
    missing = {i for i, p in enumerate(payloads) if p is None}
    kept = [i for i in range(len(payloads)) if i not in missing]
    out: list[Answer | str] = ["no input (null)"] * len(payloads)
    try:
        for i, answer in zip(kept, model.answer([payloads[i] for i in kept]) if kept else []):
            out[i] = answer
    except DataError:
        for i in kept:
            try:
                out[i] = model.answer([payloads[i]])[0]
            except DataError as e:
                out[i] = first_line(str(e)).removeprefix("input 0: ")
    return out


class VersionScorer:
    """A Ray Data actor's callable: each version's class and probability of every row of a batch
    (columns "payload" and anything else, passed through), as `class_V`, `probability_V` and
    `error_V` per version name V."""

    def __init__(self, checkpoints: dict[str, str], device: str = "cpu", allow_user_factories: bool = False) -> None:
        self.models = {name: RawInputModel(path, device, allow_user_factories) for name, path in checkpoints.items()}

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        payloads = [p if p is None or isinstance(p, bytes | str) else str(p) for p in batch["payload"].tolist()]
        out = {key: value for key, value in batch.items() if key != "payload"}
        for name, model in self.models.items():
            answered = answers_or_errors(model, payloads)
            out[f"class_{name}"] = np.array(
                [a.class_id if isinstance(a, Answer) else NO_CLASS for a in answered], dtype=np.int64
            )
            out[f"probability_{name}"] = np.array(
                [a.probability if isinstance(a, Answer) else np.nan for a in answered], dtype=np.float64
            )
            out[f"error_{name}"] = np.array(["" if isinstance(a, Answer) else a for a in answered], dtype=object)
        return out
