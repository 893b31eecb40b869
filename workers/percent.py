"""How a fraction is shown as a percentage, by every command, table, page, progress line and gate's
reason: `0.1234 → "12.34%"`, no space before the sign."""

from __future__ import annotations


def percent(fraction: float | None, none: str = "—", digits: int = 2) -> str:
    """A fraction as a percentage, `0.1234 → "12.34%"`; `none` where there is no value (a version
    without a parent: "—"; an undefined Rel-NFR: "undefined")."""
    return none if fraction is None else f"{100 * fraction:.{digits}f}%"
