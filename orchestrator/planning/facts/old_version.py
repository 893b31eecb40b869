"""`old`: a checkpoint path as written, a registry version (`NAME@ALIAS`, `NAME/VERSION`) resolved to
a local copy of its checkpoint, a version an earlier spec of the same `congruent check` registers, or
an MLflow model Congruent did not train (a registered version without Congruent's checkpoint, a
`runs:/` URI, a model folder): resolved here, its answers found by old_answers.py."""

from __future__ import annotations

from pathlib import Path

from orchestrator.planning.facts.kinds import Found, OldVersion, Problems
from orchestrator.tracking.version_refs import RegistryError, parse_version_ref
from workers.errors import problems_of


def check(found: Found) -> OldVersion | Problems | None:
    written = found.spec.old
    if written is None:
        return None
    reference = None if Path(written).exists() else parse_version_ref(written)
    if reference is not None and (alias := f"{reference[0]}@{reference[1]}") in found.upcoming:
        return OldVersion(written, None, upcoming=found.upcoming[alias])
    if reference is None and not is_model_uri(written):
        return OldVersion(written, written)
    try:
        return resolve(written, reference is not None)
    except RegistryError as e:
        return Problems.of("old", problems_of(e))


def is_model_uri(written: str) -> bool:
    """`old` names an MLflow model by a URI that is no registry reference: a run's model, or a model
    folder (one with an MLmodel file)."""
    return written.startswith("runs:/") or (Path(written) / "MLmodel").is_file()


def resolve(written: str, registered: bool) -> OldVersion:
    """The old version `written` names: a Congruent version (a local copy of its checkpoint; also a
    version registered by hand whose source is no MLflow model, only a checkpoint folder), or any
    other MLflow model (foreign). RegistryError (one line) when MLflow has none there."""
    from orchestrator.tracking import store

    database = store.embedded_database()
    if registered and database is not None and not database.exists():  # the embedded store: nothing yet
        raise RegistryError(f"{written}: no version is registered yet (no MLflow store at {database})")
    from orchestrator.tracking import registry  # MLflow, only where a store exists to ask
    from orchestrator.tracking.foreign_models import foreign_model, is_congruent_version

    store.configure()
    if registered:
        parent = registry.resolve(written)  # refuses a version that does not exist, or half published
        if not is_congruent_version(written):
            try:
                return OldVersion(written, None, foreign=foreign_model(written))
            except RegistryError:  # no MLflow model there: a checkpoint registered by hand, read as Congruent's
                pass
        return OldVersion(written, registry.checkpoint_of(parent), parent)
    return OldVersion(written, None, foreign=foreign_model(written))
