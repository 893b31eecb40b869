"""The `congruent` command line: `congruent <command> ...`, one module per command in commands/.

Each command module exposes `register(subparsers)`, which adds its parser and sets `func`, a
callable taking the parsed arguments and returning the exit code. Importing this module imports
no torch, ray or mlflow: `congruent --help` answers at once.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
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


def main(argv: Sequence[str] | None = None) -> int:
    """Parse `argv` (default: sys.argv[1:]), run the command, return its exit code."""
    try:
        args = build_parser().parse_args(argv)
    except UsageError as error:
        print(error, file=sys.stderr)
        return 2
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
