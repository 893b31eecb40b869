"""Where benchmarks write and how: the docs pages (one per area, docs/benchmarks/AREA.md), the result
files (docs/results/), markdown tables, and one section of a page rewritten, leaving the others alone."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the repository root; benchmarks run from it
RESULTS_DIR = Path("docs/results")  # every result file a benchmark writes (JSON, plots, profiles)
HEADER = "# Benchmarks\n\nNumbers written by the commands shown; rerun them to refresh.\n"


def page(area: str) -> Path:
    """The docs page of an area's benchmarks: fidelity, quality, streaming, serving or performance."""
    return Path("docs/benchmarks") / f"{area}.md"


def results_beside(page_path: Path) -> Path:
    """The results folder of the docs tree a page is in (docs/benchmarks/x.md → docs/results)."""
    return page_path.parent.parent / RESULTS_DIR.name


def link(target: Path, page_path: Path) -> str:
    """`target` as a page's relative link (docs/results/x.png from docs/benchmarks/ → ../results/x.png)."""
    return Path(os.path.relpath(target, page_path.parent)).as_posix()


def markdown_table(headers: list[str], rows: list[list[str]], align: str = "") -> str:
    """A GitHub-markdown table: a header row, the separator, one line per row. `align`: one letter a
    column, "l" (the default) or "r" (`---:`)."""
    marks = ["---:" if a == "r" else "---" for a in align.ljust(len(headers), "l")]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(marks) + "|"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def with_section(text: str, heading: str, body: str) -> str:
    """`text` with the section that starts with `heading` (up to the next `## `) replaced, or appended."""
    section = f"{heading}\n\n{body.strip()}\n"
    if heading not in text:
        return text.rstrip() + "\n\n" + section
    head, _, rest = text.partition(heading)
    tail = rest[rest.find("\n## ") :] if "\n## " in rest else ""
    return head + section + tail


def write_section(path: Path, heading: str, body: str) -> None:
    """Rewrite one section of the page at `path` (a new page starts with HEADER)."""
    text = path.read_text() if path.exists() else HEADER
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(with_section(text, heading, body))


def show_section(text: str, report: str | None, heading: str) -> None:
    """Print a benchmark's section and, with `--report FILE`, write it there under `heading`."""
    print(text)
    if report:
        write_section(Path(report), heading, text)


def run_unit_process(argv: list[str], what: str) -> dict:
    """One benchmark unit in a process of its own (`argv`, without the caller's MLflow store or Ray
    address): the JSON object its last stdout line holds; a failed unit ends the benchmark with
    `what`, its exit code and its stderr's tail."""
    import json
    import subprocess

    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "RAY_ADDRESS")}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{what}: exit {done.returncode}: {done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
