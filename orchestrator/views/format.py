"""Number formats shared by every command, table, plot label and page."""

from __future__ import annotations

from typing import Any


def percent(fraction: float | None, none: str = "—", digits: int = 2) -> str:
    """A fraction as a percentage, `0.1234 → "12.34%"`; `none` where there is no value (a version
    without a parent: "—"; an undefined Rel-NFR: "undefined")."""
    return none if fraction is None else f"{100 * fraction:.{digits}f}%"


def bcwi_line(bcwi: Any) -> str:
    """BCWI's pick as the progress line says it: α, its val ER and NFR, and (a BcwiRecord with
    them) the cross-fitted val figures auto compares it on."""
    picked = next(row for row in bcwi.sweep if row["alpha"] == bcwi.alpha)
    line = (
        f"BCWI: α = {bcwi.alpha} picked on the validation split (val ER {100 * picked['error_rate']:.2f}%, "
        f"val NFR {100 * picked['nfr']:.2f}%)"
    )
    held = getattr(bcwi, "held_out", None)
    if held is None:
        return line
    return (
        f"{line}; picked on one half, scored on the other: val ER {100 * held['error_rate']:.2f}%, "
        f"val NFR {100 * held['nfr']:.2f}%"
    )
