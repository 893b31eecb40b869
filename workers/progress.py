"""Training progress as small events: the worker that trains sends them, the driver draws them.

`ProgressReporter` turns the trainer's callbacks (`on_step`, `on_epoch`) into `ProgressEvent`s for
any `send` callable — in a Ray stage, the `put_nowait` of a Ray queue the driver drains. Inside an
epoch it sends at most one event per `interval` seconds; every epoch end is sent. Progress is best
effort: a `send` that fails (the driver went away) switches reporting off, never the training.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


class EpochStats(Protocol):
    """What an epoch's end reports (workers/training/epochs.py `EpochStats` has these fields): named
    here as a protocol, since the driver imports this module to draw events and must not import torch."""

    epoch: int
    loss: float
    samples_per_second: float
    val_error_rate: float | None
    val_nfr: float | None


@dataclass(frozen=True)
class ProgressEvent:
    """Where one training task stands: `step` of `steps_per_epoch` in `epoch` (1-based) of `epochs`."""

    task: str
    epoch: int
    epochs: int
    step: int
    steps_per_epoch: int
    samples_per_second: float | None = None
    loss: float | None = None
    val_error_rate: float | None = None
    val_nfr: float | None = None

    @property
    def completed(self) -> int:
        """Steps done so far: (epoch − 1) · steps_per_epoch + step."""
        return (self.epoch - 1) * self.steps_per_epoch + self.step

    @property
    def total(self) -> int:
        return self.epochs * self.steps_per_epoch


class ProgressReporter:
    """Callbacks for `trainer.train` that send `ProgressEvent`s of task `task` to `send`."""

    def __init__(
        self,
        task: str,
        epochs: int,
        batch_size: int,
        send: Callable[[ProgressEvent], object],
        interval: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.task, self.epochs, self.batch_size = task, epochs, batch_size
        self._send: Callable[[ProgressEvent], object] | None = send
        self._interval, self._clock = interval, clock
        self._last_sent = -float("inf")
        self._epoch_started = (0, 0.0)  # (epoch, time of its first step)
        self._last_epoch: EpochStats | None = None
        self._steps_per_epoch = 0

    def _emit(self, event: ProgressEvent) -> None:
        if self._send is None:
            return
        try:
            self._send(event)
        except Exception:  # noqa: BLE001 — a dead driver must not stop the training
            self._send = None

    def on_step(self, epoch: int, step: int, steps_per_epoch: int) -> None:
        now = self._clock()
        self._steps_per_epoch = steps_per_epoch
        if self._epoch_started[0] != epoch:
            self._epoch_started = (epoch, now)
        if now - self._last_sent < self._interval:
            return
        self._last_sent = now
        elapsed = now - self._epoch_started[1]
        rate = (step - 1) * self.batch_size / elapsed if elapsed > 0 else None
        last = self._last_epoch
        self._emit(
            ProgressEvent(
                self.task,
                epoch,
                self.epochs,
                step,
                steps_per_epoch,
                rate,
                last.loss if last else None,
                last.val_error_rate if last else None,
                last.val_nfr if last else None,
            )
        )

    def on_epoch(self, stats: EpochStats) -> None:
        self._last_epoch = stats
        steps = self._steps_per_epoch or 1
        self._emit(
            ProgressEvent(
                self.task,
                stats.epoch,
                self.epochs,
                steps,
                steps,
                stats.samples_per_second,
                stats.loss,
                stats.val_error_rate,
                stats.val_nfr,
            )
        )
