"""`congruent report MODEL [--version N] [--out report.html]`: one self-contained HTML page about a
model's updates — the version chain, the pairwise NFR heatmap, the ER–NFR scatter of every evaluated
run, and the flip explorer of the latest version (or version N) against its parent — also logged to
that version's MLflow run."""

from __future__ import annotations

import argparse
from pathlib import Path

from orchestrator.commands.options import fail, out_option


def run(args: argparse.Namespace) -> int:
    from orchestrator.driver.errors import RegistryError
    from orchestrator.driver.report import report_from_store

    out = Path(args.out or "report.html")
    try:
        path, data = report_from_store(args.model, out, args.version)
    except RegistryError as e:
        return fail("report", str(e))
    except OSError as e:
        return fail("report", f"{out}: {e.strerror or e}")
    print(
        f"{path}: {len(data.chain)} versions, {len(data.points)} evaluated runs, "
        f"{data.n_flips} negative flips of v{data.version}" + (f" against v{data.parent}" if data.parent else "")
    )
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "report",
        help="a self-contained HTML report of a model's versions and flips",
        parents=[out_option("where the HTML file goes (default: report.html)")],
    )
    parser.add_argument("model", metavar="MODEL", help="registered model name")
    parser.add_argument(
        "--version",
        metavar="N",
        default=None,
        help="the version whose flips against its parent are explored (default: the latest)",
    )
    parser.set_defaults(func=run)
