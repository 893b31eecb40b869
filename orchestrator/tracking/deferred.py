"""Interrupts held back while a version is published (registry._publish): Ctrl-C, and `congruent
cancel` (Ray Jobs stops a job's driver with SIGINT, orchestrator/jobs/ray_jobs.py), wait until the
registration has either completed or been rolled back, then stop the run as they would have."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def interrupts_deferred() -> Iterator[None]:
    """SIGINT during the block is noted, not raised; KeyboardInterrupt once the block has ended
    (after what it raised, if it raised). Off the main thread, where Python delivers no signal
    handlers, the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pressed: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda number, frame: pressed.append(number))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if pressed:
        raise KeyboardInterrupt
