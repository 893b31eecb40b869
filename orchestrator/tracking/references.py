"""Registry references as a spec writes them — `NAME@ALIAS`, `NAME/VERSION`, `models:/…` — and the
error of a reference that names nothing. Imports no MLflow: preflight and `congruent check` parse
references before they need the registry."""

from __future__ import annotations

import re
from dataclasses import dataclass

_REFERENCE = re.compile(
    r"^(?:models:/)?(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(?:@(?P<alias>[A-Za-z][\w-]*)|/(?P<version>\d+))$"
)


class RegistryError(ValueError):
    """A registry reference or comparison that cannot be made; one line."""


@dataclass(frozen=True)
class Reference:
    name: str
    version: str


def parse_reference(text: str) -> tuple[str, str | None, str | None] | None:
    """`NAME@ALIAS`, `NAME/VERSION` or `models:/…` of those → (name, alias, version); else None."""
    match = _REFERENCE.match(text)
    return (match["name"], match["alias"], match["version"]) if match else None
