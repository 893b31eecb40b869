"""The old model against the data (class count, what it reads, the images' shape) and against the
method (bcwi interpolates weights, proximal pulls toward them, and they and `init: old` start from
them: same architecture and adapter)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.planning.facts.kinds import Data, Found, OldFit, OldModel, OldVersion, Problems, Shape
from orchestrator.planning.plan import adapter_of
from workers.names import STARTS_FROM_OLD

# what each method that starts from the old weights (STARTS_FROM_OLD) does with them, as its lines say it
REUSES = {"bcwi": ("bcwi interpolates", "weights"), "proximal": ("proximal pulls toward", "the old weights")}

if TYPE_CHECKING:
    from workers.data.dataset_splits import DataSplits


def check(found: Found) -> OldFit | Problems | None:
    old, version, data = found.get(OldModel), found.get(OldVersion), found.get(Data)
    if old is None or version is None:
        return None
    spec = found.settled
    problems = [] if data is None else data_problems(version.written, old.shape, data.splits)
    starts = spec.method.name in STARTS_FROM_OLD
    reuses, what = REUSES[spec.method.name] if starts else ("init: old starts from", "")
    if old.foreign is not None and (starts or spec.init == "old"):
        problems.append(
            f"{'method: ' if starts else ''}{reuses} the old model's weights, and {version.written} is a model "
            "outside Congruent (its answers are all an update reads of it)"
        )
        return Problems(tuple(problems))
    if starts and old.shape.arch != spec.arch:
        problems.append(f"method: {reuses} {what}, so arch must equal the old model's ({old.shape.arch!r})")
    if spec.init == "old" and old.shape.arch != spec.arch:
        problems.append(f"init: old starts from the old model's weights, so arch must be {old.shape.arch!r}")
    if (starts or spec.init == "old") and old.adapter != adapter_of(spec):
        adapter = "none" if old.adapter is None else old.adapter.summary
        problems.append(
            f"train.adapter: {reuses} the old model's weights, so the adapter must be the old model's ({adapter})"
        )
    if problems:
        return Problems(tuple(problems))
    knows_all = data is None or old.classes is None or set(old.classes) >= set(range(data.splits.num_classes))
    return OldFit(None if knows_all else old.classes)


def data_problems(written: str, old: Shape, splits: DataSplits) -> list[str]:
    """The old model against the data: its class count, what it reads, the images' shape."""
    problems = []
    if old.num_classes != splits.num_classes:
        problems.append(f"old: {written} has {old.num_classes} classes, the data has {splits.num_classes}")
    if old.modality != splits.modality:
        problems.append(f"old: {written} reads {old.modality}, the data is {splits.modality}")
    elif splits.modality == "image" and (old.channels, old.size) != (splits.in_channels, splits.image_size):
        problems.append(
            f"old: {written} takes {old.channels}×{old.size}² images, the data has "
            f"{splits.in_channels}×{splits.image_size}²"
        )
    return problems
