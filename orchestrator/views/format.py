"""Number formats shared by every command, table, plot label and page."""

from __future__ import annotations

from typing import Any

from workers.percent import percent as percent  # the one percentage format, for workers/ too
from workers.percent import short_percent as short_percent


def bcwi_line(bcwi: Any) -> str:
    """BCWI's pick as the progress line says it: α, its val ER and NFR, and (a BcwiRecord with
    them) the cross-fitted val figures auto compares it on."""
    picked = next(row for row in bcwi.sweep if row["alpha"] == bcwi.alpha)
    line = (
        f"BCWI: α = {bcwi.alpha} picked on the validation split (val ER {percent(picked['error_rate'])}, "
        f"val NFR {percent(picked['nfr'])})"
    )
    held = getattr(bcwi, "held_out", None)
    if held is None:
        return line
    return (
        f"{line}; picked on one half, scored on the other: val ER {percent(held['error_rate'])}, "
        f"val NFR {percent(held['nfr'])}"
    )
