"""Every plot Congruent draws, with one matplotlib setup (the Agg backend: files, no screen).

- `nfr_heatmap`: the pairwise NFR matrix of a version chain (registry, report);
- `er_nfr_scatter`: error rate against NFR (ELODI Fig. 1b style) for Tune trials, the report's
  evaluated runs and auto candidates (their val bounds as bars) and the fidelity benchmark's methods;
- `per_class_bars`: NFR within each true class (the report's flip explorer).
Each returns a matplotlib Figure; `save` writes a PNG file, `png_base64` inlines one in a page.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

METHOD_COLOURS = {
    "none": "#7f7f7f",
    "kd": "#1f77b4",
    "fd-kl": "#17becf",
    "fd-lm": "#2ca02c",
    "dynamic-fd": "#bcbd22",
    "ensemble": "#9467bd",
    "elodi": "#d62728",
    "bcwi": "#ff7f0e",
    "proximal": "#8c564b",
}
MARKERS = "osD^vP*Xph<>"


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend (set once, before pyplot is imported)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(figure: Any, path: str | Path, dpi: int = 110) -> Path:
    """Write `figure` as a PNG at `path` (folders created) and close it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=dpi)
    pyplot().close(figure)
    return path


def png_base64(figure: Any, dpi: int = 100) -> str:
    """`figure` as a base64 PNG (for a data: URI), closed afterwards."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi)
    pyplot().close(figure)
    return base64.b64encode(buffer.getvalue()).decode()


def nfr_heatmap(names: Sequence[str], matrix: Sequence[Sequence[float | None]], title: str) -> Any:
    """M[i][j] = NFR of version j (column, new) against version i (row, old), in %; the values are
    written in the cells up to 12 versions ("—" where two versions share no eval sample)."""
    plt = pyplot()
    size = max(3.0, 0.6 * len(names) + 2)
    figure, axes = plt.subplots(figsize=(size + 1, size))
    image = axes.imshow(100 * np.array(matrix, dtype=float).reshape(len(names), len(names)), cmap="Reds")
    axes.set_xticks(range(len(names)), names)
    axes.set_yticks(range(len(names)), names)
    axes.set_xlabel("new version")
    axes.set_ylabel("old version")
    if len(names) <= 12:
        darkest = max((v for row in matrix for v in row if v is not None), default=0.0) or 1.0
        for i, row in enumerate(matrix):
            for j, value in enumerate(row):
                axes.text(
                    j,
                    i,
                    "—" if value is None else f"{100 * value:.2f}",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white" if value is not None and value > 0.6 * darkest else "black",
                )
    figure.colorbar(image, ax=axes, label="NFR (%)")
    axes.set_title(title)
    figure.tight_layout()
    return figure


@dataclass(frozen=True)
class Point:
    """One model on the ER–NFR plane (fractions); `group` is its legend entry, `label` an optional
    annotation beside it, `er_std` / `nfr_std` error bars (std over seeds); `er_interval` /
    `nfr_interval` an interval (low, high) drawn as a bar at the point's height / abscissa, which need
    not hold the point (auto's val bounds beside its eval figures)."""

    error_rate: float
    nfr: float
    group: str
    label: str | None = None
    er_std: float = 0.0
    nfr_std: float = 0.0
    er_interval: tuple[float, float] | None = None
    nfr_interval: tuple[float, float] | None = None


def er_nfr_scatter(
    points: Sequence[Point],
    title: str,
    colours: Mapping[str, str] | None = None,
    front: Sequence[Point] = (),
    highlight: Point | None = None,
    xlabel: str = "error rate (%)",
    ylabel: str = "NFR against the old model (%)",
    shipped: Sequence[Point] = (),
) -> Any:
    """Error rate (x) against NFR (y) in %, one colour and marker per group, error bars and
    intervals where given; `front` is joined by a dashed line (a Pareto front), `highlight` circled
    (a pick), `shipped` squared (the candidates auto shipped). Lower left is better."""
    plt = pyplot()
    groups = list(dict.fromkeys(p.group for p in points))
    wide = len(groups) > 6
    figure, axes = plt.subplots(figsize=(8.0 if wide else 6.5, 4.6))
    _plot_groups(axes, points, groups, colours or {}, plt.cm.tab10)
    _mark_front_and_pick(axes, front, highlight)
    if shipped:
        xs, ys = [100 * p.error_rate for p in shipped], [100 * p.nfr for p in shipped]
        axes.scatter(xs, ys, s=160, marker="s", facecolors="none", edgecolors="black", label="auto shipped")
    if any(p.er_interval or p.nfr_interval for p in points):
        axes.plot([], [], "-|", color="grey", alpha=0.6, label="no treatment + val change … its 95% bound")
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.set_title(title, fontsize=10)
    axes.grid(alpha=0.3)
    if points:
        axes.legend(fontsize=7, **({"loc": "center left", "bbox_to_anchor": (1.01, 0.5)} if wide else {}))
    figure.tight_layout()
    return figure


def _plot_groups(axes: Any, points: Sequence[Point], groups: list[str], colours: Mapping[str, str], cmap: Any) -> None:
    """Each group's points with their error bars, one colour and marker a group; labels beside them."""
    for index, group in enumerate(groups):
        mine = [p for p in points if p.group == group]
        axes.errorbar(
            [100 * p.error_rate for p in mine],
            [100 * p.nfr for p in mine],
            xerr=[100 * p.er_std for p in mine],
            yerr=[100 * p.nfr_std for p in mine],
            fmt=MARKERS[index % len(MARKERS)],
            color=colours.get(group) or cmap(index % 10),
            capsize=3,
            alpha=0.85,
            label=group,
        )
        colour = colours.get(group) or cmap(index % 10)
        for p in mine:
            if p.er_interval is not None:
                low, high = p.er_interval
                axes.plot([100 * low, 100 * high], [100 * p.nfr] * 2, "-|", color=colour, alpha=0.6, linewidth=1)
            if p.nfr_interval is not None:
                low, high = p.nfr_interval
                axes.plot([100 * p.error_rate] * 2, [100 * low, 100 * high], "-_", color=colour, alpha=0.6, linewidth=1)
    for p in points:
        if p.label:
            axes.annotate(
                p.label, (100 * p.error_rate, 100 * p.nfr), fontsize=7, xytext=(3, 3), textcoords="offset points"
            )


def _mark_front_and_pick(axes: Any, front: Sequence[Point], highlight: Point | None) -> None:
    """The Pareto front as a dashed line, the pick circled."""
    if front:
        axes.plot(
            [100 * p.error_rate for p in front],
            [100 * p.nfr for p in front],
            "--",
            color="tab:blue",
            alpha=0.6,
            label="Pareto front",
        )
    if highlight is not None:
        axes.scatter(
            [100 * highlight.error_rate],
            [100 * highlight.nfr],
            s=220,
            facecolors="none",
            edgecolors="tab:red",
            linewidths=2,
            label="pick",
        )


def per_class_bars(per_class: Sequence[tuple[str, float]], title: str) -> Any:
    """Horizontal bars: NFR within each true class (%); a class without samples (NaN) as 0."""
    plt = pyplot()
    figure, axes = plt.subplots(figsize=(6.4, 0.32 * len(per_class) + 1.2))
    axes.barh(
        range(len(per_class)), [100 * value if value == value else 0.0 for _, value in per_class], color="#d62728"
    )
    axes.set_yticks(range(len(per_class)), [name for name, _ in per_class])
    axes.invert_yaxis()
    axes.set_xlabel("NFR within the class (%)")
    axes.set_title(title)
    figure.tight_layout()
    return figure


def per_slice_bars(rows: Sequence[dict[str, Any]], title: str) -> Any:
    """Horizontal bars: NFR within each slice (%), its one-sided upper bound as a whisker, n beside
    it; slices too small to be gated hatched (workers/slices.py `slice_rows`)."""
    plt = pyplot()
    figure, axes = plt.subplots(figsize=(6.4, 0.32 * len(rows) + 1.2))
    nfr = [100 * r["nfr"] for r in rows]
    upper = [100 * (r["nfr_upper"] - r["nfr"]) for r in rows]
    bars = axes.barh(range(len(rows)), nfr, xerr=[[0] * len(rows), upper], color="#d62728", capsize=2)
    for bar, row in zip(bars, rows):
        if not row["gated"]:
            bar.set_hatch("//")
            bar.set_alpha(0.5)
    axes.set_yticks(range(len(rows)), [f"{r['column']}={r['value']} (n {r['n']:,})" for r in rows])
    axes.invert_yaxis()
    axes.set_xlabel("NFR within the slice (%)\nwhisker: its upper bound; hatched: too few samples to gate")
    axes.set_title(title)
    figure.tight_layout()
    return figure
