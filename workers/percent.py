"""How a fraction is shown as a percentage, by every command, table, page, progress line and gate's
reason: `0.1234 → "12.34%"`, no space before the sign."""

from __future__ import annotations


def percent(fraction: float | None, none: str = "—", digits: int | None = 2) -> str:
    """A fraction as a percentage, `0.1234 → "12.34%"` (`digits` after the point; None: as few as
    it takes, `0.95 → "95%"`, for a confidence level); `none` where there is no value (a version
    without a parent: "—"; an undefined Rel-NFR: "undefined")."""
    if fraction is None:
        return none
    return f"{100 * fraction:g}%" if digits is None else f"{100 * fraction:.{digits}f}%"
