"""`init`'s weights load into the version's model, and `train.adapter`'s targets name layers of it:
the model is built once here, so a file of another architecture fails before any Ray work."""

from __future__ import annotations

from orchestrator.planning.facts.kinds import Data, Found, InitFile, InitFit, ModelInputs, Problems
from orchestrator.planning.model_inputs import check_init_fits
from pipelines.spec import SpecError


def check(found: Found) -> InitFit | Problems | None:
    from workers.data.input_spec import InputSpec

    spec, data, inputs = found.settled, found.get(Data), found.get(ModelInputs)
    if (spec.init is None or spec.init == "old") and spec.train.adapter is None:
        return InitFit()  # nothing to fit
    if data is None or found.get(InitFile) is None:
        return None
    splits = data.splits
    reads = None if inputs is None else inputs.inputs
    if reads is None and splits.modality != "image":
        return None  # the text inputs could not be settled: that problem is the one reported
    reads = reads or InputSpec.image(splits.in_channels, splits.image_size)
    try:
        check_init_fits(spec, splits.num_classes, reads)
    except SpecError as e:
        return Problems(tuple(e.problems))
    return InitFit()
