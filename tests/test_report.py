"""The report's pure parts: confidences, thumbnails, and the page for hand-made data."""

import base64
import io

import numpy as np
import pytest
from PIL import Image

from orchestrator.tracking import live
from orchestrator.views.report import Flip, ReportData, png_thumbnail, render_html, top1_confidence


def test_top1_confidence_is_the_softmax_of_the_topk_logits():
    values = np.array([[2.0, 0.0, 0.0], [1.0, 1.0, 1.0]], dtype=np.float32)
    expected = [np.e**2 / (np.e**2 + 2), 1 / 3]
    assert np.allclose(top1_confidence(values), expected)
    assert np.allclose(top1_confidence(values + 1000), expected)  # shifted: no overflow


def test_thumbnail_is_a_scaled_png_of_the_image():
    image = np.zeros((1, 4, 5), dtype=np.uint8)
    image[0, 1, 2] = 255
    picture = Image.open(io.BytesIO(base64.b64decode(png_thumbnail(image, scale=3))))
    assert picture.size == (15, 12)
    assert picture.getpixel((7, 4)) == 255 and picture.getpixel((0, 0)) == 0


def _data(**fields):
    chain = [
        {
            "version": "1",
            "label": "v1",
            "method": "none",
            "arch": "mlp-small",
            "parent_version": None,
            "error_rate": 0.2,
            "nfr": None,
            "pfr": None,
            "rel_nfr": None,
            "nfr_upper": None,
            "er_increase_upper": None,
            "aliases": ["champion"],
            "created": "t1",
        },
        {
            "version": "2",
            "label": "v2 <b>",
            "method": "elodi",
            "arch": "small-cnn",
            "parent_version": "1",
            "error_rate": 0.1,
            "nfr": 0.02,
            "pfr": 0.12,
            "rel_nfr": 1.25,
            "nfr_upper": 0.0481,
            "er_increase_upper": -0.0312,
            "aliases": ["challenger"],
            "created": "t2",
        },
    ]
    points = [
        {"label": "v2", "method": "elodi", "error_rate": 0.1, "nfr": 0.02, "version": "2"},
        {"label": "trial alpha=0.5", "method": "elodi", "error_rate": 0.12, "nfr": 0.015, "version": None},
    ]
    defaults = dict(
        model="m",
        chain=chain,
        matrix_versions=["1", "2"],
        matrix=[[0.0, 0.02], [0.12, 0.0]],
        points=points,
        version="2",
        parent="1",
        n_eval=100,
        n_flips=2,
        flips=[Flip(7, "Bag", "Bag", 0.9, "Shirt", 0.6, png_thumbnail(np.zeros((1, 2, 2), np.uint8)))],
        per_class=[("Bag", 0.5), ("Shirt", float("nan"))],
    )
    return ReportData(**{**defaults, **fields})


def test_page_holds_every_section_escaped_and_inline():
    page = render_html(_data())
    assert "v2 &lt;b&gt;" in page and "v2 <b>" not in page  # labels are escaped
    assert page.count("data:image/png;base64,") == 4  # heatmap, scatter, per-class bars, one thumbnail
    assert "<b>2</b> negative flips of v2 against v1 on 100 regression-eval samples (NFR 2.00%)" in page
    assert "Bag (90%)" in page and "Shirt (60%)" in page
    assert "125.00%" in page  # Rel-NFR of v2
    assert "<td>2.00%</td><td>4.81%</td><td>12.00%</td><td>-3.12%</td>" in page  # NFR, its bound, PFR, ΔER's


def test_page_without_a_parent_says_there_is_nothing_to_explore():
    page = render_html(_data(parent=None, flips=[], per_class=[], n_flips=0, notes=["a note"]))
    assert "no flips to show" in page and "a note" in page


def test_the_live_section_shows_each_serving_session_and_only_when_there_is_one():
    from orchestrator.views.live import LIVE_HEADERS, live_row

    counts = live.live_counts(np.array([0, 1, 2, 1]), np.array([0, 2, 2, 1]), np.array([0, 1, -1, 1]))
    session = {"champion": "1", "candidate": "2", "status": "RUNNING", **counts.figures(0.95)}
    page = render_html(_data(live=[live_row(session)], live_headers=LIVE_HEADERS))
    assert "<h2>Live traffic</h2>" in page
    # v1 shadowed by v2: 4 pairs, 1 disagreement; 3 labelled, v2 wrong on one v1 got right (NFR 1/3)
    assert "<td>v1</td><td>v2</td><td>running</td><td>4</td><td>25.00%</td>" in page
    assert "<td>3</td><td>0.00%</td><td>33.33%</td><td>33.33%</td>" in page
    assert "Live traffic" not in render_html(_data())


def test_the_er_nfr_plot_holds_every_auto_candidate_at_its_eval_figures_with_its_val_bounds():
    """A version trained with method auto: each candidate at its eval ER and NFR, its bars no
    treatment's eval ER (NFR) plus the candidate's val change up to its upper bound, the shipped one
    marked; a version without auto adds nothing, and the page says how many candidates it drew."""
    from orchestrator.views.report import auto_candidate_points, scatter_points

    shown = {"val_error_rate": 0.1, "val_nfr": 0.03, "seconds": 9.0, "tested": True, "eligible": True}
    none = {**shown, "name": "none", "error_rate": 0.10, "nfr": 0.030, "val_er_change": None, "val_er_upper": None}
    kd = {
        **shown,
        "name": "kd",
        "error_rate": 0.11,
        "nfr": 0.015,
        "val_er_change": 0.002,
        "val_er_upper": 0.008,
        "val_nfr_change": -0.012,
        "val_nfr_upper": -0.004,
    }
    bcwi = {**kd, "name": "bcwi", "error_rate": 0.12, "nfr": 0.01, "val_nfr_change": -0.04, "val_nfr_upper": -0.02}
    chain = _data().chain
    chain[1] = {**chain[1], "method": "auto", "auto": {"chosen": "kd", "candidates": [none, kd, bcwi]}}
    points, shipped = auto_candidate_points(chain)
    assert [(p.label, p.group, p.error_rate, p.nfr) for p in points] == [
        ("none", "v2 auto candidates", 0.10, 0.030),
        ("kd", "v2 auto candidates", 0.11, 0.015),
        ("bcwi", "v2 auto candidates", 0.12, 0.01),
    ]
    assert points[0].er_interval is None and points[0].nfr_interval is None
    assert points[1].er_interval == pytest.approx((0.102, 0.108)) and points[1].nfr_interval == pytest.approx(
        (0.018, 0.026)
    )
    assert points[2].nfr_interval == (0.0, pytest.approx(0.01))  # 3 % − 4 % floored at 0
    assert shipped == [points[1]]
    assert auto_candidate_points(_data().chain) == ([], [])
    plotted, marked = scatter_points(_data(chain=chain))
    assert plotted[2:] == points and marked == shipped  # after the 2 evaluated runs, what the figure draws
    page = render_html(_data(chain=chain))
    assert (
        "2 evaluated models (pipelines, their ensemble paragons, Tune trials) and\n3 candidates of method auto" in page
    )
