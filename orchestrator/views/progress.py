"""What the driver shows while the stages run: rich progress bars on a terminal, plain lines
elsewhere (logs), nothing with `--quiet`. The displays draw `workers.progress.ProgressEvent`s;
orchestrator/execution/watch.py feeds them from the training tasks.
"""

from __future__ import annotations

import sys
from typing import Any

from orchestrator.views.format import percent
from workers.progress import ProgressEvent


def describe(event: ProgressEvent) -> str:
    """The figures shown beside a bar: epoch, samples/s, val ER and val NFR when known."""
    parts = [f"epoch {event.epoch}/{event.epochs}"]
    if event.samples_per_second:
        parts.append(f"{event.samples_per_second:,.0f} samples/s")
    if event.val_error_rate is not None:
        parts.append(f"val ER {percent(event.val_error_rate)}")
    if event.val_nfr is not None:
        parts.append(f"val NFR {percent(event.val_nfr)}")
    return "  ".join(parts)


class QuietDisplay:
    """Shows nothing: `--quiet`, `--json`, and the stages run without a display."""

    live = False
    prefix = ""

    def message(self, text: str) -> None:
        pass

    def add(self, task: str) -> None:
        pass

    def update(self, event: ProgressEvent) -> None:
        pass

    def finish(self, task: str, summary: str) -> None:
        pass

    def close(self) -> None:
        pass


class LinesDisplay:
    """Off a terminal (CI logs, Ray Job logs): no bars, one line per stage and per finished task."""

    live = False
    prefix = ""

    def message(self, text: str) -> None:
        print(text, flush=True)

    def add(self, task: str) -> None:
        pass

    def update(self, event: ProgressEvent) -> None:
        pass

    def finish(self, task: str, summary: str) -> None:
        print(f"  {self.prefix}{task}: {summary}", flush=True)

    def close(self) -> None:
        pass


class RichDisplay:
    """Stage messages above live rich progress bars, one per training task."""

    live = True

    def __init__(self, console: Any = None) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.console = console or Console()
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description:<20}"),
            BarColumn(bar_width=28),
            TextColumn("{task.percentage:>3.0f}%"),
            TimeElapsedColumn(),
            TextColumn("{task.fields[figures]}"),
            console=self.console,
            transient=False,
        )
        self.tasks: dict[str, Any] = {}  # task name → its current bar
        self.finished: set[str] = set()  # names whose bar is complete: a new task of that name gets a new bar
        self.prefix = ""  # e.g. the version being trained, before each new bar's name
        self.progress.start()
        self.closed = False

    def message(self, text: str) -> None:
        self.progress.console.print(text)

    def add(self, task: str) -> None:
        if task not in self.tasks or task in self.finished:
            self.finished.discard(task)
            self.tasks[task] = self.progress.add_task(self.prefix + task, total=None, figures="waiting for a worker")

    def update(self, event: ProgressEvent) -> None:
        self.add(event.task)
        self.progress.update(
            self.tasks[event.task], total=event.total, completed=event.completed, figures=describe(event)
        )

    def finish(self, task: str, summary: str) -> None:
        self.add(task)
        bar = next(t for t in self.progress.tasks if t.id == self.tasks[task])
        total = bar.total or 1
        self.progress.update(self.tasks[task], total=total, completed=total, figures=summary)
        self.finished.add(task)

    def close(self) -> None:
        if not self.closed:
            self.progress.stop()
            self.closed = True


def make_display(quiet: bool | None = None) -> QuietDisplay | LinesDisplay | RichDisplay:
    """Nothing with `quiet`; else live bars on a terminal, plain lines when stdout is not a TTY."""
    if quiet:
        return QuietDisplay()
    return RichDisplay() if sys.stdout.isatty() else LinesDisplay()
