"""`train.protected_weight`: the model's protected set (`congruent protect`) read from the registry,
as the rows that join the train split of held text data (workers/data/protected_rows.py)."""

from __future__ import annotations

from orchestrator.planning.facts.kinds import Found, Problems, ProtectedTraining, Source

FIELD = "train.protected_weight"


def check(found: Found) -> ProtectedTraining | Problems | None:
    from orchestrator.tracking.protected import protected_set
    from workers.data.protected_rows import ProtectedRows

    spec = found.settled
    weight = spec.train.protected_weight
    source = found.get(Source)
    if weight is None or source is None:
        return None
    if source.request.kind != "text" or source.request.streamed is not None:
        held = "streamed" if source.request.streamed is not None else "image"
        return Problems.of(FIELD, [f"protected samples join a held text split; this data is {held} data"])
    suite = protected_set(spec.model)
    if suite is None:
        return Problems.of(
            FIELD, [f"{spec.model} has no protected set (`congruent protect {spec.model} TABLE` registers one)"]
        )
    rows = ProtectedRows(
        tuple(suite.ids.tolist()), tuple(suite.inputs), tuple(suite.labels.tolist()), weight, suite.version
    )
    return ProtectedTraining(rows)
