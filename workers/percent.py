"""How a fraction is shown as a percentage, by every command, table, page, progress line and gate's
reason: `0.1234 → "12.34%"`, no space before the sign."""

from __future__ import annotations


def percent(fraction: float | None, none: str = "—", digits: int = 2) -> str:
    """A fraction as a percentage, `0.1234 → "12.34%"`; `none` where there is no value (a version
    without a parent: "—"; an undefined Rel-NFR: "undefined")."""
    return none if fraction is None else f"{100 * fraction:.{digits}f}%"


def short_percent(fraction: float) -> str:
    """A level or a limit as a percentage with no trailing zeros, `0.95 → "95%"`, `0.025 → "2.5%"`:
    a confidence level, a gate's limit where it is said rather than tabled."""
    return f"{100 * fraction:g}%"
