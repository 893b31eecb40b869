"""Where a registered version's ledger is: in the run that registered it (`ledger/`), or, for a
version Congruent did not train (a scikit-learn pipeline registered by hand), in the run of the
newest Congruent version trained against it (`old: NAME/VERSION`): that run's `ledger/parent/` holds
the foreign model's answers on its eval split, recorded with that version's checksums."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mlflow import MlflowClient

from orchestrator.tracking.artifact_cache import fetch
from orchestrator.tracking.ledger import LEDGER_FILE, LEGACY_LEDGER_FILE
from orchestrator.tracking.tags import PUBLISHING, VERSION_TAGS

PARENT_LEDGER = f"ledger/parent/{LEDGER_FILE}"  # in a run trained against a foreign old model


def ledger_path(run_id: str, tags: Mapping[str, str] | None = None) -> Path | None:
    """A local copy of the run's ledger (by id, else one written before ids), checked against its
    version's `tags` (artifact_cache.py); None when it has none."""
    name = ledger_name(run_id)
    return None if name is None else fetch(run_id, f"ledger/{name}", tags)


def ledger_name(run_id: str) -> str | None:
    names = {Path(info.path).name for info in MlflowClient().list_artifacts(run_id, "ledger")}
    return next((name for name in (LEDGER_FILE, LEGACY_LEDGER_FILE) if name in names), None)


def version_ledger_path(mv: Any) -> Path | None:
    """The ledger of the model version `mv`: its run's own, else the one a Congruent version trained
    against it recorded (`foreign_parent_ledger`); None when neither exists."""
    own = ledger_path(mv.run_id, mv.tags)
    return own if own is not None else foreign_parent_ledger(mv.name, str(mv.version))


def foreign_parent_ledger(name: str, version: str) -> Path | None:
    """The answers of version `version` of `name`, a model Congruent did not train, as the newest
    complete version of `name` trained against it recorded them (its `foreign_parent` tag names
    models:/NAME/VERSION), checked against that version's checksum tags; None when none was."""
    client = MlflowClient()
    uri, tag = f"models:/{name}/{version}", VERSION_TAGS["foreign_parent"]
    children = [
        mv
        for mv in client.search_model_versions(f"name='{name}'")
        if (mv.tags or {}).get(tag) == uri and PUBLISHING not in (mv.tags or {}) and mv.run_id
    ]
    for child in sorted(children, key=lambda mv: int(mv.version), reverse=True):
        run_id = str(child.run_id)
        if PARENT_LEDGER in {info.path for info in client.list_artifacts(run_id, "ledger/parent")}:
            return fetch(run_id, PARENT_LEDGER, child.tags)
    return None
