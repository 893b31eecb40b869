"""What the commands share: argparse parents for the common options, and the one-line error."""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable

from workers.errors import first_line


def quiet_option() -> argparse.ArgumentParser:
    """--quiet: no progress, only the result."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "--quiet",
        action="store_true",
        default=None,
        help="print only the result (off a terminal, progress comes as plain lines, not bars)",
    )
    return parent


def json_option(what: str = "print only the result, as JSON") -> argparse.ArgumentParser:
    """--json: the machine-readable result instead of tables."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--json", action="store_true", help=what)
    return parent


def out_option(what: str) -> argparse.ArgumentParser:
    """--out DIR|FILE (default: the command's own, shown in `what`)."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--out", default=None, help=what)
    return parent


def ray_address(
    what: str = "GCS address of a Ray cluster to join, e.g. 127.0.0.1:6379 (default: RAY_ADDRESS, "
    "else Ray starts inside this command)",
) -> argparse.ArgumentParser:
    """--ray-address: the GCS address of a running Ray cluster, for commands that run Ray work here.
    Given, it is RAY_ADDRESS for the whole command (preflight then counts no local trainers)."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--ray-address", metavar="HOST:PORT", default=None, help=what, action=_RayAddress)
    return parent


class _RayAddress(argparse.Action):
    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, value: object, option: object = None
    ) -> None:
        os.environ["RAY_ADDRESS"] = str(value)
        setattr(namespace, self.dest, value)


def jobs_address() -> argparse.ArgumentParser:
    """--jobs-address: the dashboard (Jobs API) URL of a Ray cluster, for commands that talk to it."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "--jobs-address",
        metavar="URL",
        default=None,
        help="Ray dashboard / Jobs API address, http://HEAD:8265 (default: RAY_JOBS_ADDRESS)",
    )
    return parent


def fail(command: str, message: str, code: int = 2) -> int:
    """Print `congruent COMMAND: error: MESSAGE` (its first line) on stderr; return `code`."""
    first = first_line(str(message))
    print(f"congruent {command}: error: {first}", file=sys.stderr)
    return code


def fail_all(command: str, problems: list[str], code: int = 2) -> int:
    """`fail` for each problem, one line each; return `code`."""
    for problem in problems:
        fail(command, problem, code)
    return code


def report_checks(command: str, paths: list[str], ray_address: str | None, quiet: bool = False) -> int:
    """`congruent check` (and `run --check`): every problem of the specs at `paths`, one line each
    on stderr, exit 2 if there is any; else a line per spec saying what it will run."""
    from orchestrator.driver.check import check_specs

    failed = False
    for result in check_specs(paths, ray_address):
        fail_all(command, result.problems)
        failed = failed or bool(result.problems)
        if not result.problems and not quiet:
            print(f"{result.path}: ok: {result.summary}")
    return 2 if failed else 0


def fraction(low: float, high: float) -> Callable[[str], float]:
    """argparse `type=` for a fraction within [low, high]: 0.05 is 5 %, so a 5 typed by habit (or a
    value out of range) is a usage error, not a limit that lets everything through."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a fraction (0.05 = 5%), got {text!r}") from None
        if not math.isfinite(value) or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be a fraction in [{low:g}, {high:g}] (0.05 = 5%), got {text}")
        return value

    parse.__name__ = "fraction"
    return parse


def positive(kind: Callable[[str], float]) -> Callable[[str], float]:
    """An argparse type: a number of `kind` (int, float) above 0, else one line naming the value."""

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text} is not above 0")
        return value

    parse.__name__ = kind.__name__  # what argparse names in its message
    return parse
