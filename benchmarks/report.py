"""Writing one benchmark's section into docs/benchmarks.md, leaving the other sections alone."""

from __future__ import annotations

from pathlib import Path

HEADER = "# Benchmarks\n\nNumbers written by the commands shown; rerun them to refresh.\n"


def markdown_table(headers: list[str], rows: list[list[str]]) -> str:
    """A GitHub-markdown table: a header row, the separator, one line per row."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def write_section(path: Path, heading: str, body: str) -> None:
    """Replace the section that starts with `heading` (up to the next `## `), or append it."""
    section = f"{heading}\n\n{body.strip()}\n"
    text = path.read_text() if path.exists() else HEADER
    if heading in text:
        head, _, rest = text.partition(heading)
        tail = rest[rest.find("\n## ") :] if "\n## " in rest else ""
        text = head + section + tail
    else:
        text = text.rstrip() + "\n\n" + section
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


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
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "RAY_ADDRESS")}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{what}: exit {done.returncode}: {done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
