"""Version refs: a registered version as a spec or a command names it — `NAME@ALIAS`,
`NAME/VERSION`, `models:/…` — and the error of a ref that names nothing. Imports no MLflow:
preflight and `congruent check` parse refs before they need the registry."""

from __future__ import annotations

import re
from dataclasses import dataclass

_VERSION_REF = re.compile(
    r"^(?:models:/)?(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(?:@(?P<alias>[A-Za-z][\w-]*)|/(?P<version>\d+))$"
)


class RegistryError(ValueError):
    """A registry reference or comparison that cannot be made; one line."""


class LockLost(RegistryError):
    """A registry lock's holder lost it (its lease lapsed, another took it, its session ended): the
    step the lock protects must not run (locks.py, pg_locks.py)."""


@dataclass(frozen=True)
class VersionRef:
    """A registered version, resolved: the model's name and MLflow's version number."""

    name: str
    version: str


def parse_version_ref(text: str) -> tuple[str, str | None, str | None] | None:
    """`NAME@ALIAS`, `NAME/VERSION` or `models:/…` of those → (name, alias, version); else None."""
    match = _VERSION_REF.match(text)
    return (match["name"], match["alias"], match["version"]) if match else None
