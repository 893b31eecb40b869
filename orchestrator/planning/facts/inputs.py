"""What the version's new models read: its tokenizer (trained here on the train split) or its images'
normalisation — the old model's own when the new one starts from its weights (bcwi, proximal, `init: old`).
`congruent check` settles them only where a later check needs them (init's or the adapter's fit)."""

from __future__ import annotations

from orchestrator.planning.facts.kinds import Data, Found, InitFile, ModelInputs, OldModel, Problems
from orchestrator.planning.model_inputs import image_inputs, text_inputs
from pipelines.spec import SpecError
from workers.names import STARTS_FROM_OLD


def check(found: Found) -> ModelInputs | Problems | None:
    spec, old, data = found.settled, found.get(OldModel), found.get(Data)
    starts_from_old = spec.method.name in STARTS_FROM_OLD or spec.init == "old"
    if old is not None and old.settings is not None and starts_from_old:
        return ModelInputs(old.settings.inputs)  # the old weights keep what they read
    if data is None or found.get(InitFile) is None:
        return None
    if not (found.settle_inputs or fits_checked(found)):
        return None  # `congruent check`: no later check needs them, so no tokenizer is trained
    train = data.splits.train
    try:
        return ModelInputs(text_inputs(spec, train) if train.modality == "text" else image_inputs(spec, train))
    except SpecError as e:
        return Problems(tuple(e.problems))


def fits_checked(found: Found) -> bool:
    """Whether a model of the version is built in preflight: to load `init`'s weights into it, or to
    find `train.adapter`'s targets in it."""
    spec = found.settled
    return (spec.init is not None and spec.init != "old") or spec.train.adapter is not None
