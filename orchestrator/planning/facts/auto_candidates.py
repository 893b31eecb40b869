"""`method: auto`: which candidates it trains (pipelines/auto.py), bcwi and proximal only where they can
start from the old weights (same architecture and adapter), and what their models read (the old model's
own)."""

from __future__ import annotations

import numpy as np

from orchestrator.planning.facts.kinds import AutoCandidates, Data, FoldPlan, Found, OldModel, Problems
from orchestrator.planning.plan import adapter_of
from pipelines.auto import CROSS_FIT_TRAINED, auto_choice


def check(found: Found) -> AutoCandidates | Problems | None:
    spec, old = found.settled, found.get(OldModel)
    if spec.method.name != "auto" or old is None:
        return None
    why_not = None
    if old.foreign is not None:
        why_not = (
            f"it starts from the old weights, and the old model ({old.foreign}) is outside Congruent: its answers only"
        )
    elif old.shape.arch != spec.arch:
        why_not = f"it starts from the old weights, and arch {spec.arch!r} is not the old model's ({old.shape.arch!r})"
    elif old.adapter != adapter_of(spec):
        why_not = "it starts from the old weights, and train.adapter is not the old model's"
    choice = auto_choice(spec.method, why_not)
    if len(choice.candidates) == 1:
        left_out = "; ".join(f"{name}: {why}" for name, why in choice.skipped)
        return Problems.of("method", [f"auto has no candidate beside no treatment ({left_out})"])
    data = found.get(Data)
    folds = None if data is None else fold_problem(spec.method.cross_fit, data, spec.data.val_fraction)
    if folds is not None and not isinstance(folds, FoldPlan):
        return Problems.of("method.cross_fit", [folds])
    return AutoCandidates(choice, None if old.settings is None else old.settings.inputs, folds)


def fold_problem(setting: str | int, data: Data, val_fraction: float) -> FoldPlan | str | None:
    """What `method.cross_fit` will do on these splits (a FoldPlan; None: off), or why it cannot: J of
    the K = 1/val_fraction folds need a held source (a streamed one is read once, in order), J ≤ K,
    and at least J labelled samples of every class in train ∪ val. auto: CROSS_FIT_TRAINED folds
    where they fit, else off."""
    from workers.data.dataset_splits import ImageSet, TextSet
    from workers.data.folds import fold_count

    if setting == "off":
        return None
    folds = fold_count(val_fraction)
    trained = min(CROSS_FIT_TRAINED, folds) if setting == "auto" else int(setting)
    train, val = data.splits.train, data.splits.val
    if not isinstance(train, ImageSet | TextSet) or not isinstance(val, ImageSet | TextSet):
        return (
            None if setting == "auto" else f"{trained} folds need a held source: a streamed one is read once, in order"
        )
    if trained > folds:
        return f"{trained} folds, but train ∪ val is cut into {folds} (1 / data.val_fraction): at most {folds}"
    labels = np.concatenate([train.labels.numpy(), val.labels.numpy()])
    counts = np.bincount(labels[labels >= 0], minlength=data.splits.num_classes)
    present = counts[counts > 0]
    fewest = int(present.min()) if len(present) else 0
    if fewest < trained:
        if setting == "auto":
            return None
        name = int(np.flatnonzero(counts == fewest)[0])
        return (
            f"{trained} folds, but class {name} has {fewest} labelled sample{'s' if fewest != 1 else ''} in "
            f"train ∪ val: at most {fewest} folds"
        )
    return FoldPlan(trained, folds, setting == "auto", len(labels))
