"""Progress from the Ray tasks to the display: training tasks send `ProgressEvent`s to a Ray queue
(`ray.util.queue.Queue`, an actor without CPUs), and `StageWatch.wait` drains it while it waits for
the tasks; on an interrupt (Ctrl-C) the tasks still running are cancelled, and waited for."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from orchestrator.views.progress import LinesDisplay, QuietDisplay, RichDisplay


class StageWatch:
    """Feeds a display from the stages' Ray tasks (see module docstring)."""

    def __init__(self, display: QuietDisplay | LinesDisplay | RichDisplay | None = None) -> None:
        self.display = display or QuietDisplay()
        self.queue = None
        if self.display.live:
            from ray.util.queue import Queue

            self.queue = Queue(actor_options={"num_cpus": 0})

    def say(self, text: str) -> None:
        self.display.message(text)

    def drain(self) -> None:
        if self.queue is None:
            return
        for event in self.queue.get_nowait_batch(self.queue.qsize()):
            self.display.update(event)

    def wait(self, tasks: Mapping[Any, str], poll_s: float = 0.25) -> Iterator[Any]:
        """Yield the ObjectRefs of `tasks` ({ref: task name}) as they finish, drawing progress
        meanwhile; on an interrupt, cancel the ones still running and re-raise."""
        import ray

        for name in tasks.values():
            self.display.add(name)
        pending = list(tasks)
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1, timeout=poll_s)
                self.drain()
                yield from done
        except BaseException:
            for ref in pending:
                ray.cancel(ref, force=True)
            # until their workers are gone: a cancelled task must not write a checkpoint after the
            # caller has cleaned up (Ctrl-C discards partial checkpoints)
            ray.wait(pending, num_returns=len(pending), timeout=30)
            raise

    def close(self) -> None:
        if self.queue is not None:
            self.drain()
            self.queue.shutdown()
            self.queue = None
        self.display.close()
