"""A Ray worker stopped by SIGTERM (a Tune trial at Ctrl-C) leaves no traceback on the terminal."""

from __future__ import annotations

import sys
import weakref

from workers.runtime import stop_quietly


class _Thing:
    pass


def _collect(callback) -> None:
    thing = _Thing()
    ref = weakref.ref(thing, callback)
    del thing  # the callback runs here: an exception from it is "unraisable"
    assert ref() is None


def test_an_exit_raised_in_a_weakref_callback_prints_nothing_and_other_errors_still_show(monkeypatch, capsys):
    monkeypatch.setattr(sys, "unraisablehook", sys.__unraisablehook__)  # Python's own, not pytest's
    stop_quietly()

    def exit_(_ref):  # what Ray's SIGTERM handler raises in whatever frame runs
        raise SystemExit(1)

    _collect(exit_)
    assert capsys.readouterr().err == ""

    def fail(_ref):
        raise ValueError("kept")

    _collect(fail)
    assert "ValueError: kept" in capsys.readouterr().err
