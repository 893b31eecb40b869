"""`congruent report MODEL [--out report.html]`: one self-contained HTML page about a model's updates.

    congruent report fmnist-classifier --out report.html

The page holds the version chain, the pairwise NFR heatmap, the ER–NFR scatter of every evaluated
run (each method tried, Tune trials included), and the flip explorer of the latest version against
its parent (thumbnails, true label, both predictions with confidence, per-class NFR bars). Figures
are PNGs inlined as data URIs: the file opens anywhere, offline. It is also logged to the latest
version's MLflow run as `report/report.html`.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import html
import io
import sys
import tempfile
from pathlib import Path
from typing import Any

from orchestrator.report_data import ReportData

METHOD_COLOURS = {"none": "#7f7f7f", "kd": "#1f77b4", "fd-kl": "#17becf", "fd-lm": "#2ca02c",
                  "dynamic-fd": "#bcbd22", "ensemble": "#9467bd", "elodi": "#d62728", "bcwi": "#ff7f0e"}


def _figure_png(fig: Any) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    return base64.b64encode(buffer.getvalue()).decode()


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def scatter_png(points: list[dict[str, Any]], title: str) -> str:
    """ER (x) against NFR (y) in %, one colour per method; registered versions labelled vN."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for method in sorted({p["method"] for p in points}):
        mine = [p for p in points if p["method"] == method]
        ax.scatter([100 * p["error_rate"] for p in mine], [100 * p["nfr"] for p in mine], label=method,
                   color=METHOD_COLOURS.get(method), s=36, alpha=0.85)
    for p in points:
        if p["version"]:
            ax.annotate(f"v{p['version']}", (100 * p["error_rate"], 100 * p["nfr"]), textcoords="offset points",
                        xytext=(4, 4), fontsize=8)
    ax.set_xlabel("error rate (%)")
    ax.set_ylabel("NFR against the old model (%)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if points:
        ax.legend(fontsize=8)
    fig.tight_layout()
    png = _figure_png(fig)
    plt.close(fig)
    return png


def per_class_png(per_class: list[tuple[str, float]], title: str) -> str:
    """Horizontal bars: NFR within each true class (%)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 0.32 * len(per_class) + 1.2))
    names = [name for name, _ in per_class]
    ax.barh(range(len(per_class)), [100 * value if value == value else 0.0 for _, value in per_class],
            color="#d62728")
    ax.set_yticks(range(len(per_class)), names)
    ax.invert_yaxis()
    ax.set_xlabel("NFR within the class (%)")
    ax.set_title(title)
    fig.tight_layout()
    png = _figure_png(fig)
    plt.close(fig)
    return png


def heatmap_png(data: ReportData) -> str:
    from orchestrator.registry import write_matrix_files

    with tempfile.TemporaryDirectory() as tmp:
        _, png = write_matrix_files(Path(tmp), [f"v{v}" for v in data.matrix_versions], data.matrix,
                                    f"{data.model}: NFR of column vs row (%)")
        return base64.b64encode(png.read_bytes()).decode()


def _percent(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.2f} %"


def _img(png: str, alt: str, css: str = "figure") -> str:
    return f'<img class="{css}" alt="{html.escape(alt)}" src="data:image/png;base64,{png}">'


def _table(headers: list[str], rows: list[list[str]], css: str = "") -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f'<table class="{css}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def chain_section(data: ReportData) -> str:
    rows = [[f"v{html.escape(r['version'])}", html.escape(r["label"]), html.escape(r["method"]), html.escape(r["arch"]),
             f"v{r['parent_version']}" if r["parent_version"] else "—", _percent(r["error_rate"]), _percent(r["nfr"]),
             _percent(r["pfr"]), _percent(r["rel_nfr"]), html.escape(", ".join(r["aliases"])), r["created"]]
            for r in data.chain]
    return _table(["version", "label", "method", "arch", "parent", "ER", "NFR", "PFR", "Rel-NFR", "aliases",
                   "registered"], rows)


def flip_section(data: ReportData) -> str:
    if data.parent is None:
        return "<p>The latest version has no earlier version on the same eval split: no flips to show.</p>"
    summary = (f"<p><b>{data.n_flips}</b> negative flips of v{data.latest} against v{data.parent} on "
               f"{data.n_eval} regression-eval samples (NFR {_percent(data.n_flips / max(data.n_eval, 1))}). "
               f"Showing the {len(data.flips)} the new version is most confident about.</p>")
    bars = _img(per_class_png(data.per_class, f"v{data.parent} → v{data.latest}: NFR per true class"),
                "per-class NFR") if data.per_class else ""
    rows = [[_img(f.thumbnail, f"eval image {f.index}", "thumb") if f.thumbnail else "—", str(f.index),
             html.escape(f.label), f"{html.escape(f.old_class)} ({100 * f.old_confidence:.0f} %)",
             f"{html.escape(f.new_class)} ({100 * f.new_confidence:.0f} %)"] for f in data.flips]
    table = _table(["image", "eval index", "true label", f"v{data.parent} (right)", f"v{data.latest} (wrong)"],
                   rows, "flips")
    return summary + bars + table


STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; padding: 0 1.5em; max-width: 1100px; color: #222; }
h1 { margin-bottom: 0.2em; } h2 { border-bottom: 1px solid #ddd; padding-bottom: 0.2em; margin-top: 1.6em; }
table { border-collapse: collapse; font-size: 0.9em; margin: 0.6em 0; }
th, td { border: 1px solid #ddd; padding: 4px 8px; text-align: left; } th { background: #f4f4f4; }
.figure { max-width: 100%; display: block; margin: 0.6em 0; } .thumb { image-rendering: pixelated; }
.note { color: #8a5a00; } .muted { color: #666; font-size: 0.9em; }
"""

# Counts the figures the browser decoded (tests/test_report.py reads it from the rendered DOM).
RENDER_CHECK = """
window.addEventListener("load", function () {
  var images = Array.prototype.slice.call(document.images);
  var drawn = images.filter(function (i) { return i.complete && i.naturalWidth > 0; }).length;
  document.body.setAttribute("data-images-drawn", drawn + "/" + images.length);
});
"""


def render_html(data: ReportData) -> str:
    """The whole page as one string."""
    generated = datetime.datetime.now().isoformat(timespec="seconds")
    notes = "".join(f'<p class="note">{html.escape(n)}</p>' for n in data.notes)
    heatmap = _img(heatmap_png(data), "pairwise NFR heatmap") if data.matrix else "<p>No matrix.</p>"
    scatter = _img(scatter_png(data.points, f"{data.model}: every evaluated run"), "ER–NFR scatter")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(data.model)} — Congruent report</title>
<style>{STYLE}</style></head>
<body>
<h1>{html.escape(data.model)}</h1>
<p class="muted">Congruent update report, generated {generated}. NFR: share of eval samples the old
version got right and the new one gets wrong. Rel-NFR = NFR / ((1 − ER<sub>old</sub>) · ER<sub>new</sub>):
below 1, fewer flips than two independent models would make.</p>
{notes}
<h2>Version chain</h2>
{chain_section(data)}
<h2>Pairwise NFR</h2>
<p class="muted">Row: old version, column: new version, on the regression-eval split of the latest version.</p>
{heatmap}
<h2>Error rate against NFR</h2>
<p class="muted">{len(data.points)} evaluated models (pipelines, their ensemble paragons, Tune trials); lower left is better.</p>
{scatter}
<h2>Flip explorer: v{html.escape(data.latest)} against {('v' + html.escape(data.parent)) if data.parent else '—'}</h2>
{flip_section(data)}
<script>{RENDER_CHECK}</script>
</body></html>
"""


def write_report(model: str, out: Path, log_to_mlflow: bool = True) -> tuple[Path, ReportData]:
    """Gather, render and write the report; log it to the latest version's run."""
    from mlflow import MlflowClient

    from orchestrator.report_data import gather

    data = gather(model)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_html(data), encoding="utf-8")
    if log_to_mlflow:
        run_id = MlflowClient().get_model_version(model, data.latest).run_id
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp, "report.html")
            copy.write_bytes(out.read_bytes())
            MlflowClient().log_artifact(run_id, str(copy), "report")
    return out, data


def run(args: argparse.Namespace) -> int:
    from orchestrator import tracking
    from orchestrator.registry import RegistryError

    tracking.configure()
    try:
        path, data = write_report(args.model, Path(args.out))
    except RegistryError as e:
        print(f"congruent report: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"congruent report: error: {args.out}: {e.strerror or e}", file=sys.stderr)
        return 2
    print(f"{path}: {len(data.chain)} versions, {len(data.points)} evaluated runs, "
          f"{data.n_flips} negative flips of v{data.latest}" + (f" against v{data.parent}" if data.parent else ""))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("report", help="a self-contained HTML report of a model's versions and flips")
    parser.add_argument("model", metavar="MODEL", help="registered model name")
    parser.add_argument("--out", default="report.html", help="where the HTML file goes (default: report.html)")
    parser.set_defaults(func=run)
