"""The `congruent` command line: `congruent <command> ...`, one module per command in commands/.

Each command module exposes `register(subparsers)`, which adds its parser and sets `func`, a
callable taking the parsed arguments and returning the exit code. Importing this module imports
no torch, ray or mlflow: `congruent --help` answers at once.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import NoReturn

from orchestrator.commands import COMMANDS


class UsageError(Exception):
    """A command-line usage error, reported by `main` as one line and exit code 2."""


class CongruentArgumentParser(argparse.ArgumentParser):
    """ArgumentParser whose usage errors raise UsageError instead of printing the usage."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: error: {message} (see {self.prog} --help)")


def build_parser() -> CongruentArgumentParser:
    """The `congruent` parser with every command registered."""
    parser = CongruentArgumentParser(
        prog="congruent", description="Regression-free model updates: train, measure and register them on Ray + MLflow."
    )
    subparsers = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, parser_class=CongruentArgumentParser
    )
    for module in COMMANDS:
        module.register(subparsers)
    return parser


@contextlib.contextmanager
def ctrl_c_raises() -> Iterator[None]:
    """Ctrl-C (SIGINT) raises KeyboardInterrupt while a command runs — which `run`, `demo` and `tune`
    turn into cancelled stages, an MLflow run marked KILLED and exit 130 — whatever this process
    inherited or was left with: a command started as a background job of a script inherits SIGINT
    ignored (POSIX; Python then never installs its handler), one started by Ray inherits it blocked,
    and code that ran earlier in the same process may have left a handler of its own (asyncio's
    runner turns a first Ctrl-C into a task cancellation). The previous handler is restored after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, _interrupt)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        if previous is not None:  # None: a handler not set from Python, which cannot be put back
            signal.signal(signal.SIGINT, previous)


def _interrupt(signum: int, frame: object) -> None:
    """Ctrl-C: the workers' output stops reaching this terminal (`mute_workers`), then
    KeyboardInterrupt, as Python's own handler raises it."""
    from orchestrator.execution.cluster import mute_workers

    mute_workers()
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    """Parse `argv` (default: sys.argv[1:]), run the command, return its exit code."""
    try:
        args = build_parser().parse_args(argv)
    except UsageError as error:
        print(error, file=sys.stderr)
        return 2
    if "RAY_JOB_CONFIG_JSON_ENV_VAR" in os.environ:  # a Ray Job's driver: its settings from its package
        from orchestrator.jobs.credentials import load_into_driver

        load_into_driver()
    with ctrl_c_raises():
        return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
