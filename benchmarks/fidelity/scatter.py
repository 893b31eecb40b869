"""The fidelity sections' ER–NFR scatter plot, one point per method (orchestrator/views/plots.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def scatter(
    table: Sequence[Mapping[str, Any]], path: Path, title: str, from_old: Sequence[Mapping[str, Any]] = ()
) -> Path:
    """ER_new against NFR, one point per method (mean, error bars: std over seeds); with `from_old`,
    one colour per start (from scratch, from the old weights) and each point labelled with its method."""
    from orchestrator.views import plots

    def point(entry: Mapping[str, Any], group: str | None) -> plots.Point:
        label = entry["method"].split(" (")[0].replace("plain old → ", "").replace(" K=all", "") if group else None
        return plots.Point(
            entry["er_new"][0],
            entry["nfr"][0],
            group or entry["method"],
            label,
            er_std=entry["er_new"][1],
            nfr_std=entry["nfr"][1],
        )

    starts = "from scratch" if from_old else None
    points = [point(e, starts) for e in table] + [point(e, "from the old weights") for e in from_old]
    figure = plots.er_nfr_scatter(
        points, title, xlabel="ER of the new model (%)", ylabel="NFR w.r.t. the old model (%)"
    )
    return plots.save(figure, path, dpi=120)
