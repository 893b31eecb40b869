"""What people look at: the percent format, CLI tables and every plot (decoded back as PNGs)."""

import base64
import io

from PIL import Image

from orchestrator.views import plots
from orchestrator.views.format import percent
from orchestrator.views.tables import table


def test_percent_has_one_format_and_says_what_is_missing():
    assert percent(0.12345) == "12.35%" and percent(1.0) == "100.00%" and percent(0.9, digits=0) == "90%"
    assert percent(None) == "—" and percent(None, none="undefined") == "undefined"


def test_table_aligns_labels_left_and_numbers_right_without_wrapping():
    lines = table(["name", "ER"], [["a", "1.00%"], ["a much longer name " * 8, "12.00%"]]).splitlines()
    assert len(lines) == 4 and all(line.startswith("  ") for line in lines)  # header, rule, two rows
    assert lines[0].split() == ["name", "ER"] and set(lines[1].strip()) <= {"─", " "}
    assert lines[2].rstrip().endswith("1.00%") and lines[3].rstrip().endswith("12.00%")
    assert len(lines[2].rstrip()) == len(lines[3].rstrip())  # the numbers share a right edge
    assert lines[2].strip().startswith("a ") and "a much longer name " * 8 in lines[3]


def decoded(png: str) -> Image.Image:
    picture = Image.open(io.BytesIO(base64.b64decode(png)))
    picture.load()
    return picture


def test_every_plot_draws_a_png(tmp_path):
    heatmap = plots.nfr_heatmap(["v1", "v2", "v3"], [[0, 0.02, 0.03], [0.1, 0, 0.01], [0.1, 0.02, 0]], "chain")
    points = [
        plots.Point(0.10, 0.020, "elodi", "v2"),
        plots.Point(0.12, 0.015, "elodi"),
        plots.Point(0.11, 0.030, "none", er_std=0.002, nfr_std=0.001),
    ]
    scatter = plots.er_nfr_scatter(points, "runs", colours=plots.METHOD_COLOURS, front=points[:2], highlight=points[1])
    bars = plots.per_class_bars([("Bag", 0.5), ("Shirt", float("nan"))], "per class")
    for figure in (heatmap, scatter, bars):
        picture = decoded(plots.png_base64(figure))
        assert picture.format == "PNG" and picture.width > 300 and picture.height > 150
    path = plots.save(plots.nfr_heatmap(["a"], [[0.0]], "one"), tmp_path / "deep" / "m.png")
    assert decoded(base64.b64encode(path.read_bytes()).decode()).format == "PNG"


def test_versions_prints_undefined_for_a_rel_nfr_its_parent_leaves_undefined(monkeypatch, capsys):
    """docs/reading-nfr.md: an undefined Rel-NFR (ER_new 0 or ER_old 1) prints `undefined`; "—" is
    for a version with no parent, which has no flips at all."""
    from orchestrator.cli import main
    from orchestrator.tracking import registry, store
    from orchestrator.tracking.version_record import VersionRecord

    shared = {"label": "v1", "method": "none", "arch": "mlp", "fingerprint": "f", "created": "today"}
    rows = [
        VersionRecord(**shared, version="1", error_rate=0.2),
        VersionRecord(**shared, version="2", parent_version="1", error_rate=0.0, nfr=0.0, pfr=0.2),
    ]
    monkeypatch.setattr(store, "configure", lambda: "sqlite://")
    monkeypatch.setattr(registry, "chain", lambda model: rows)
    assert main(["versions", "m"]) == 0
    lines = capsys.readouterr().out.splitlines()
    first, second = (next(line for line in lines if line.strip().startswith(v)) for v in ("1 ", "2 "))
    assert "undefined" not in first and "undefined" in second
