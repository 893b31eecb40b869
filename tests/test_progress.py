"""Progress events: throttling, figures, and the driver's display of them."""

from __future__ import annotations

import io

from orchestrator.views.progress import LinesDisplay, QuietDisplay, RichDisplay, describe, make_display
from workers.progress import ProgressEvent, ProgressReporter
from workers.training.epochs import EpochStats


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_reporter_throttles_steps_and_always_sends_epoch_ends():
    sent, clock = [], Clock()
    reporter = ProgressReporter("replica-0", epochs=2, batch_size=10, send=sent.append, interval=1.0, clock=clock)
    reporter.on_step(1, 1, 4)  # first step: sent
    clock.now += 0.5
    reporter.on_step(1, 2, 4)  # within the interval: dropped
    clock.now += 0.6
    reporter.on_step(1, 3, 4)  # 1.1 s after the first: sent; 2 steps · 10 samples in 1.1 s
    reporter.on_epoch(
        EpochStats(
            epoch=1,
            loss=0.5,
            lr=0.1,
            seconds=1.2,
            samples_per_second=33.0,
            clipped_fraction=0.0,
            val_error_rate=0.2,
            val_nfr=0.03,
        )
    )
    assert [(e.epoch, e.step) for e in sent] == [(1, 1), (1, 3), (1, 4)]
    assert abs(sent[1].samples_per_second - 20 / 1.1) < 1e-9
    assert sent[1].completed == 3 and sent[1].total == 8
    end = sent[2]
    assert (end.completed, end.val_error_rate, end.val_nfr, end.samples_per_second) == (4, 0.2, 0.03, 33.0)
    clock.now += 5
    reporter.on_step(2, 1, 4)  # the next epoch carries the last epoch's val figures
    assert (sent[3].completed, sent[3].val_nfr, sent[3].loss) == (5, 0.03, 0.5)


def test_reporter_stops_sending_when_the_driver_is_gone():
    calls = []

    def broken(event):
        calls.append(event)
        raise ConnectionError("queue actor died")

    reporter = ProgressReporter("student", 1, 8, broken, interval=0.0)
    reporter.on_step(1, 1, 3)
    reporter.on_step(1, 2, 3)  # no exception reaches the training loop, and no retry either
    assert len(calls) == 1


def test_describe_shows_known_figures_only():
    event = ProgressEvent("student", 2, 5, 10, 40, samples_per_second=1234.4, val_error_rate=0.1234, val_nfr=0.0051)
    assert describe(event) == "epoch 2/5  1,234 samples/s  val ER 12.34%  val NFR 0.51%"
    assert describe(ProgressEvent("r", 1, 1, 1, 1)) == "epoch 1/1"


def test_rich_display_draws_one_bar_per_task():
    from rich.console import Console

    out = io.StringIO()
    display = RichDisplay(Console(file=out, force_terminal=True, width=140))
    display.add("replica-0")
    display.add("replica-1")
    display.update(ProgressEvent("replica-1", 1, 2, 3, 4, samples_per_second=100.0))
    display.finish("replica-0", "val ER 9.00 % (reused)")
    display.add("replica-0")  # a new task of a finished name (the next pipeline) gets its own bar
    assert len(display.progress.tasks) == 3
    display.close()
    display.close()  # idempotent
    text = out.getvalue()
    assert "replica-0" in text and "replica-1" in text and "val ER 9.00 % (reused)" in text
    assert "100 samples/s" in text


def test_plain_lines_off_a_terminal_and_nothing_when_quiet(monkeypatch, capsys):
    display = make_display()  # pytest's captured stdout is not a TTY
    assert isinstance(display, LinesDisplay)
    display.prefix = "v2 "
    display.message("stage 1/3: training 2 replicas")
    display.update(ProgressEvent("replica-0", 1, 2, 3, 4))  # no per-step chatter in logs
    display.finish("replica-0", "val ER 9.00 %")
    assert capsys.readouterr().out == "stage 1/3: training 2 replicas\n  v2 replica-0: val ER 9.00 %\n"
    assert isinstance(make_display(quiet=True), QuietDisplay)
