"""Ctrl-C during a Tune search: the first press has Tune stop every trial (their checkpoints then
deleted by the search), a second ends the driver at once; Tune's own SIGINT handler, warnings and
console reporter stay off (the command prints its own lines)."""

from __future__ import annotations

import logging
import os
import signal
import threading
from typing import Any

from ray import tune

from orchestrator.execution.cluster import mute_workers


class StopOnCtrlC(tune.Stopper):
    """Has Tune stop every trial once `pressed` is set (by the search's SIGINT handler, `fit_until_ctrl_c`)."""

    def __init__(self) -> None:
        self.pressed = threading.Event()

    def __call__(self, trial_id: str, result: dict) -> bool:
        return False

    def stop_all(self) -> bool:
        return self.pressed.is_set()

    def __getstate__(self) -> dict:  # Tune pickles its run config; an Event does not pickle
        return {}

    def __setstate__(self, state: dict) -> None:
        self.pressed = threading.Event()


def fit_until_ctrl_c(tuner: Any, ctrl_c: threading.Event) -> Any:
    """`tuner.fit()` with Ctrl-C ending the search: the first press sets `ctrl_c`, which the search's
    stopper turns into Tune stopping every trial; a second press raises KeyboardInterrupt at once.
    Tune's own SIGINT handler stays off (it prints how to resume an experiment the search does not
    resume), and so do its warnings and its console reporter (at verbose 0 it still prints where
    the results are and a TensorBoard hint; the command prints its own lines)."""

    def on_sigint(signum: int, frame: Any) -> None:
        mute_workers()
        if ctrl_c.is_set():
            raise KeyboardInterrupt
        ctrl_c.set()

    tune_logger = logging.getLogger("ray.tune")
    level, handler = tune_logger.level, signal.getsignal(signal.SIGINT)
    in_main = threading.current_thread() is threading.main_thread()
    tune_logger.setLevel(logging.CRITICAL)
    # RAY_AIR_NEW_OUTPUT=0: the legacy reporter, which at verbose 0 prints nothing
    settings = {"TUNE_DISABLE_SIGINT_HANDLER": "1", "RAY_AIR_NEW_OUTPUT": "0"}
    previous = {key: os.environ.get(key) for key in settings}
    os.environ.update(settings)
    if in_main:
        signal.signal(signal.SIGINT, on_sigint)
    try:
        return tuner.fit()
    finally:
        tune_logger.setLevel(level)
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if in_main:
            signal.signal(signal.SIGINT, handler)
