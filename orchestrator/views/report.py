"""The HTML report of a model's updates: one self-contained page rendered from `report.html.j2`
(Jinja2, autoescaped), figures inlined as base64 PNGs so that it opens anywhere, offline.

`ReportData` is what the page shows; orchestrator/driver/report.py gathers it from MLflow.
"""

from __future__ import annotations

import base64
import datetime
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from orchestrator.views import plots
from orchestrator.views.format import percent


@dataclass(frozen=True)
class Flip:
    """One negative flip: the old version was right, the new one is wrong."""

    index: int  # position in the regression-eval split
    label: str
    old_class: str
    old_confidence: float  # softmax over the ledger's top-k logits
    new_class: str
    new_confidence: float
    thumbnail: str | None = None  # base64 PNG (images)
    text: str | None = None  # the sample itself (text)


@dataclass
class ReportData:
    model: str
    chain: list[dict[str, Any]]  # one row per version (VersionRecord.row of tracking.registry.chain)
    matrix_versions: list[str]
    matrix: list[list[float | None]]  # None: two versions that share no eval sample
    points: list[dict[str, Any]]  # {label, method, error_rate, nfr, version} per evaluated run
    version: str  # the version whose flips are explored: the latest, unless asked for another
    parent: str | None = None
    n_eval: int = 0
    n_flips: int = 0
    flips: list[Flip] = field(default_factory=list)
    per_class: list[tuple[str, float]] = field(default_factory=list)
    per_slice: list[dict[str, Any]] = field(default_factory=list)  # the worst slices (workers/slices.py rows)
    notes: list[str] = field(default_factory=list)
    live: list[list[str]] = field(default_factory=list)  # serving sessions with a shadow (views/live.py rows)
    live_headers: list[str] = field(default_factory=list)


def top1_confidence(topk_values: np.ndarray) -> np.ndarray:
    """p(ŷ) = softmax(top-k logits)[0] per row: the predicted class's probability, with the mass
    of the classes outside the top k ignored (an upper bound, tight when they are small)."""
    shifted = topk_values - topk_values.max(axis=1, keepdims=True)
    weights = np.exp(shifted)
    return weights[:, 0] / weights.sum(axis=1)


def png_thumbnail(image: np.ndarray, scale: int = 3) -> str:
    """A C×H×W uint8 image as a base64 PNG, `scale`× larger (nearest neighbour)."""
    from PIL import Image

    pixels = image[0] if image.shape[0] == 1 else np.transpose(image, (1, 2, 0))
    picture = Image.fromarray(np.ascontiguousarray(pixels))
    picture = picture.resize((picture.width * scale, picture.height * scale), Image.Resampling.NEAREST)
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def auto_candidate_points(chain: Sequence[Mapping[str, Any]]) -> tuple[list[plots.Point], list[plots.Point]]:
    """Every candidate of each version trained with method auto (a chain row's `auto`), at its eval
    ER and NFR against the version's parent, a legend group per version; its bars: no treatment's
    eval ER (NFR) plus the candidate's val ER (NFR) change against no treatment, up to the change's
    one-sided 95% upper bound (the interval auto tested, orchestrator/policy/auto_choice.py). Returns
    (the candidates' points, the shipped ones')."""
    points, shipped = [], []
    for row in chain:
        auto = row.get("auto")
        if not auto:
            continue
        none: Mapping[str, Any] = next((c for c in auto["candidates"] if c["name"] == "none"), {})
        for c in auto["candidates"]:
            if c.get("error_rate") is None or c.get("nfr") is None:
                continue
            point = plots.Point(
                c["error_rate"],
                c["nfr"],
                f"v{row['version']} auto candidates",
                c["name"],
                er_interval=_shifted(none.get("error_rate"), c.get("val_er_change"), c.get("val_er_upper")),
                nfr_interval=_shifted(none.get("nfr"), c.get("val_nfr_change"), c.get("val_nfr_upper")),
            )
            points.append(point)
            if c["name"] == auto["chosen"]:
                shipped.append(point)
    return points, shipped


def _shifted(base: float | None, change: float | None, upper: float | None) -> tuple[float, float] | None:
    """(base + change, base + upper), floored at 0; None where a figure is missing (no treatment, or
    a version registered before the changes were kept)."""
    if base is None or change is None or upper is None:
        return None
    return max(0.0, base + change), max(0.0, base + upper)


def scatter_points(data: ReportData) -> tuple[list[plots.Point], list[plots.Point]]:
    """The ER–NFR plot's points: every evaluated run (a colour per method), then every auto
    candidate of the chain (`auto_candidate_points`); and the shipped candidates, marked."""
    points = [
        plots.Point(p["error_rate"], p["nfr"], p["method"], f"v{p['version']}" if p["version"] else None)
        for p in data.points
    ]
    candidates, shipped = auto_candidate_points(data.chain)
    return points + candidates, shipped


def figures(data: ReportData) -> dict[str, str | None]:
    """The page's figures as base64 PNGs (None: not drawn)."""
    points, shipped = scatter_points(data)
    return {
        "heatmap": plots.png_base64(
            plots.nfr_heatmap(
                [f"v{v}" for v in data.matrix_versions], data.matrix, f"{data.model}: NFR of column vs row (%)"
            )
        )
        if data.matrix
        else None,
        "scatter": plots.png_base64(
            plots.er_nfr_scatter(
                points,
                f"{data.model}: every evaluated run" + (" and auto candidate" if shipped else ""),
                colours=plots.METHOD_COLOURS,
                shipped=shipped,
            )
        ),
        "per_class": plots.png_base64(
            plots.per_class_bars(data.per_class, f"v{data.parent} → v{data.version}: NFR per true class")
        )
        if data.per_class
        else None,
        "per_slice": plots.png_base64(
            plots.per_slice_bars(data.per_slice, f"v{data.parent} → v{data.version}: the worst slices")
        )
        if data.per_slice
        else None,
    }


@lru_cache(maxsize=1)
def _template() -> Any:
    from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

    environment = Environment(
        loader=PackageLoader("orchestrator.views", "."),
        autoescape=select_autoescape(["j2"]),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters["percent"] = percent
    return environment.get_template("report.html.j2")


def render_html(data: ReportData) -> str:
    """The whole page as one string."""
    return _template().render(
        data=data,
        figures=figures(data),
        candidates=len(auto_candidate_points(data.chain)[0]),
        generated=datetime.datetime.now().isoformat(timespec="seconds"),
    )
