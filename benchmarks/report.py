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
