"""The command-line reference, generated from the commands' own argparse parsers:

    python -m orchestrator.cli_reference > docs/cli-reference.md

Every command, what it does, and each argument and option with its default and help, so the
reference cannot drift from the flags (tests/test_docs.py checks the committed file).
"""

from __future__ import annotations

import argparse

from orchestrator.cli import build_parser


def _flag(action: argparse.Action) -> str:
    names = ", ".join(f"`{name}`" for name in action.option_strings) or f"`{action.metavar or action.dest}`"
    if action.option_strings and action.nargs != 0:
        names += f" {action.metavar or action.dest.upper()}"
    return names


def _default(action: argparse.Action) -> str:
    if action.nargs == 0 or action.default in (None, argparse.SUPPRESS):
        return ""
    return f"`{action.default}`"


def command_section(name: str, parser: argparse.ArgumentParser, help_text: str) -> str:
    rows = ["| argument | default | meaning |", "|---|---|---|"]
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        meaning = (action.help or "").replace("|", "\\|").replace("\n", " ")
        if action.choices and not isinstance(action, argparse._SubParsersAction):
            meaning += f" (one of: {', '.join(map(str, action.choices))})"
        rows.append(f"| {_flag(action)} | {_default(action)} | {meaning} |")
    usage = " ".join(parser.format_usage().split()).removeprefix("usage: ")
    return f"## congruent {name}\n\n{help_text}\n\n```\n{usage}\n```\n\n" + "\n".join(rows) + "\n"


def reference() -> str:
    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {choice.dest: choice.help for choice in subparsers._choices_actions}
    head = (
        "# Command-line reference\n\n"
        "Generated from the commands' parsers by `python -m orchestrator.cli_reference`; do not edit by hand. "
        "Every command prints one line per problem on stderr and exits 2 on bad input; `congruent COMMAND "
        "--help` says the same as this page.\n"
    )
    sections = [command_section(name, sub, helps.get(name) or "") for name, sub in subparsers.choices.items()]
    return "\n".join([head, *sections])


if __name__ == "__main__":
    print(reference(), end="")
