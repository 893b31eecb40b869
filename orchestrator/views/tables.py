"""CLI tables, drawn by rich: a header rule, left-aligned label columns, right-aligned numbers."""

from __future__ import annotations

import io
from collections.abc import Sequence

from rich import box
from rich.console import Console
from rich.table import Table


def table(header: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1, indent: int = 2) -> str:
    """The table as text (no colour, never wrapped): the first `left` columns left-aligned, the
    others right-aligned; each line indented by `indent` spaces."""
    grid = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for column, name in enumerate(header):
        grid.add_column(name, justify="left" if column < left else "right", no_wrap=True)
    for row in rows:
        grid.add_row(*row)
    buffer = io.StringIO()
    Console(file=buffer, width=10_000, color_system=None, force_terminal=False).print(grid)
    return "\n".join(" " * indent + line.rstrip() for line in buffer.getvalue().rstrip("\n").splitlines())


def slice_table(rows: Sequence[dict], shown: int) -> str:
    """The first `shown` slice rows (workers/slices.py `slice_rows`: worst first) as a table; a slice
    too small to be gated marked *."""
    from orchestrator.views.format import percent

    cells = [
        [
            r["column"],
            r["value"] + ("" if r["gated"] else " *"),
            str(r["n"]),
            percent(r["er_old"]),
            percent(r["er_new"]),
            percent(r["nfr"]),
            percent(r["nfr_upper"]),
        ]
        for r in rows[:shown]
    ]
    return table(["column", "value", "n", "ER old", "ER new", "NFR", "NFR ≤"], cells, left=2)
