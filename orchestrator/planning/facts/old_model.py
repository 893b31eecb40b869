"""The old model: its checkpoint fetched and loaded (weights too, so a checkpoint of another
architecture fails here, not in a worker) — its architecture, classes and what it reads; a foreign
model's answer table (old_answers.py) as the model it will be."""

from __future__ import annotations

from orchestrator.planning.facts.kinds import Data, Found, OldAnswers, OldModel, OldVersion, Problems, Shape
from orchestrator.planning.model_inputs import file_digest
from workers import storage
from workers.names import ANSWER_TABLE


def check(found: Found) -> OldModel | Problems | None:
    from workers.models.architectures import ModelError
    from workers.models.checkpoints import CheckpointError, classes_seen_of, load_model

    old = found.get(OldVersion)
    if old is None:
        return None
    if old.upcoming is not None:
        return OldModel(old.upcoming)
    if old.foreign is not None:  # its answer table, which the run's old-answers stage writes
        answers, data = found.get(OldAnswers), found.get(Data)
        if answers is None or data is None:
            return None
        shape = Shape(ANSWER_TABLE, data.splits.num_classes, "text")
        return OldModel(shape, None, answers.classes, None, old.foreign.uri)
    spec = found.settled
    assert spec.old is not None  # the checkpoint old_version found, made absolute
    local = spec.old
    try:
        local = storage.fetch_checkpoint(spec.old)
        _, settings = load_model(local, spec.allow_user_factories)
        seen = classes_seen_of(local)
        digest = file_digest(local) if spec.init == "old" else None
    except (CheckpointError, FileNotFoundError, ModelError) as e:
        return Problems((f"old: {as_written(str(e), (local, spec.old), old.written)}",))
    reads = settings.inputs
    shape = Shape(settings.arch, settings.num_classes, reads.modality, reads.channels, reads.size)
    return OldModel(shape, settings, None if seen is None else tuple(seen), digest)


def as_written(message: str, paths: tuple[str, ...], written: str) -> str:
    """`message` with the paths the driver used for `old` (a registry version's temporary copy, an
    absolute path) replaced by what the spec said."""
    for path in sorted({p for p in paths if p}, key=len, reverse=True):
        message = message.replace(path, written)
    return message
