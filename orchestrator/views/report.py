"""The HTML report of a model's updates: one self-contained page rendered from `report.html.j2`
(Jinja2, autoescaped), figures inlined as base64 PNGs so that it opens anywhere, offline.

`ReportData` is what the page shows; orchestrator/driver/report.py gathers it from MLflow.
"""

from __future__ import annotations

import base64
import datetime
import io
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


def figures(data: ReportData) -> dict[str, str | None]:
    """The page's figures as base64 PNGs (None: not drawn)."""
    points = [
        plots.Point(p["error_rate"], p["nfr"], p["method"], f"v{p['version']}" if p["version"] else None)
        for p in data.points
    ]
    return {
        "heatmap": plots.png_base64(
            plots.nfr_heatmap(
                [f"v{v}" for v in data.matrix_versions], data.matrix, f"{data.model}: NFR of column vs row (%)"
            )
        )
        if data.matrix
        else None,
        "scatter": plots.png_base64(
            plots.er_nfr_scatter(points, f"{data.model}: every evaluated run", colours=plots.METHOD_COLOURS)
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
        data=data, figures=figures(data), generated=datetime.datetime.now().isoformat(timespec="seconds")
    )
