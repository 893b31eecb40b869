"""`old`: a checkpoint path as written, a registry version (`NAME@ALIAS`, `NAME/VERSION`) resolved to
a local copy of its checkpoint, or a version an earlier spec of the same `congruent check` registers."""

from __future__ import annotations

from pathlib import Path

from orchestrator.planning.facts.kinds import Found, OldVersion, Problems
from orchestrator.tracking.version_refs import RegistryError, VersionRef, parse_version_ref
from workers.errors import problems_of


def check(found: Found) -> OldVersion | Problems | None:
    written = found.spec.old
    if written is None:
        return None
    reference = None if Path(written).exists() else parse_version_ref(written)
    if reference is not None and (alias := f"{reference[0]}@{reference[1]}") in found.upcoming:
        return OldVersion(written, None, upcoming=found.upcoming[alias])
    if reference is None:
        return OldVersion(written, written)
    try:
        checkpoint, parent = resolve(written)
    except RegistryError as e:
        return Problems.of("old", problems_of(e))
    return OldVersion(written, checkpoint, parent)


def resolve(reference: str) -> tuple[str, VersionRef]:
    """A local copy of the checkpoint of the registry version `reference` names, and that version."""
    from orchestrator.tracking import store

    database = store.embedded_database()
    if database is not None and not database.exists():  # the embedded store: nothing registered yet
        raise RegistryError(f"{reference}: no version is registered yet (no MLflow store at {database})")
    from orchestrator.tracking import registry  # MLflow, only where a store exists to ask

    store.configure()
    parent = registry.resolve(reference)
    return registry.checkpoint_of(parent), parent
