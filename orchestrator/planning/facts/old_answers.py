"""A foreign old model (old_version.py) against the data: it answers class probabilities (not classes
only) of classes the data has, on the spec's input column, and the splits are held text. Its answer
table's name: the model's resolved URI and the digest of every text it will answer (train with the
unlabelled texts, val, eval), so a second update against the same model on the same texts reads it."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from orchestrator.planning.facts.kinds import Data, Found, OldAnswers, OldVersion, Problems
from workers import storage

if TYPE_CHECKING:
    from orchestrator.tracking.foreign_models import ForeignModel

PROBED_TEXTS = 16  # texts `check` scores to learn what the model answers


def check(found: Found) -> OldAnswers | Problems | None:
    from workers.data.text import TextSet

    old, data = found.get(OldVersion), found.get(Data)
    if old is None or old.foreign is None or data is None:
        return None
    splits, spec = data.splits, found.settled
    parts = (splits.distillation_split, splits.val, splits.eval)
    if not all(isinstance(part, TextSet) for part in parts):
        held = "image data" if splits.modality == "image" else "a streamed source"
        return Problems.of(
            "old",
            [f"{old.written} is a model outside Congruent, whose answers are computed on held text; this is {held}"],
        )
    texts = [text for part in parts for text in part.texts]  # type: ignore[attr-defined]
    names = class_names(splits.eval.classes, splits.num_classes)
    column = old.foreign.column or spec.data.text_column
    from orchestrator.tracking.foreign_models import probe_probabilities

    try:
        answered = probe_probabilities(old.foreign, column, texts[:PROBED_TEXTS], names)
    except ValueError as e:
        return Problems.of("old", [f"{old.written}: {e}"])
    known = tuple(sorted(names.index(name) for name in answered))
    return OldAnswers(
        storage.join(spec.storage, spec.model, "old-answers", f"{answers_name(old.foreign)}-{texts_digest(texts)}.pt"),
        column,
        None if len(known) == len(names) else known,
    )


def answers_name(model: ForeignModel) -> str:
    """What names a foreign model in its answer table's file: its resolved URI and MLflow's id of it."""
    return f"{model.folder}-{model.model_uuid[:12]}" if model.model_uuid else model.folder


def class_names(classes: tuple[str, ...], count: int) -> tuple[str, ...]:
    """The data's class names, as a foreign model's answers name them: its own, else the ids as text."""
    return tuple(classes) if classes else tuple(str(i) for i in range(count))


def texts_digest(texts: list[str]) -> str:
    """sha256 of the distinct texts, in sorted order; 16 hex digits."""
    digest = hashlib.sha256()
    for text in sorted(set(texts)):
        digest.update(text.encode("utf-8") + b"\0")
    return digest.hexdigest()[:16]
