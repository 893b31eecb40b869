"""The `congruent` command line: `congruent <subcommand> ...`.

Each subcommand module exposes `register(subparsers)`, which adds its parser
and sets `func`, a callable taking the parsed arguments and returning the exit code.
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn, Sequence

from orchestrator import compare, demo, jobs, report, run, tune_command, versions

SUBCOMMANDS = (compare, demo, run, tune_command, versions, report, jobs)


class UsageError(Exception):
    """A command-line usage error, reported by `main` as one line and exit code 2."""


class CongruentArgumentParser(argparse.ArgumentParser):
    """ArgumentParser whose usage errors raise UsageError instead of printing the usage."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: error: {message}\nsee {self.prog} --help")


def build_parser() -> CongruentArgumentParser:
    """The `congruent` parser with every module of SUBCOMMANDS registered."""
    parser = CongruentArgumentParser(
        prog="congruent", description="Measure regressions when a classifier is updated."
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in SUBCOMMANDS:
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse `argv` (default: sys.argv[1:]), run the subcommand, return its exit code."""
    try:
        args = build_parser().parse_args(argv)
    except UsageError as error:
        print(error, file=sys.stderr)
        return 2
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
