"""`congruent promote MODEL VERSION --max-nfr F [--max-er-increase F] [--confidence C] [--live]`: move
alias `champion` to a version only if its NFR against the current champion and its ER increase stay
within the limits (from the ledgers, no re-inference; with --confidence, their upper confidence
bounds; with --live, its NFR on labelled live traffic too), as a compare-and-set that holds when
promotions race; otherwise say why and exit 1."""

from __future__ import annotations

import argparse
import sys

from orchestrator.commands.gate_options import add_gate_flags, parse_gate
from orchestrator.commands.options import fail, fail_all
from pipelines.operations import PromoteSpec

GATE_FLAGS = tuple(PromoteSpec.model_fields)  # every field of the gate is a flag of promote


def run(args: argparse.Namespace) -> int:
    from orchestrator.driver.promote import RegistryError, promote_version
    from pipelines.spec import SpecError

    try:
        gate = parse_gate(args, GATE_FLAGS)
    except SpecError as e:
        return fail_all("promote", e.problems)
    try:
        verdict = promote_version(args.model, args.version, gate, args.live)
    except RegistryError as e:
        return fail("promote", str(e))
    if not verdict.passed:
        print(f"{args.model} v{args.version} NOT promoted: {verdict.reason}", file=sys.stderr)
        return 1
    print(f"{args.model} v{args.version} is now champion: {verdict.reason}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("promote", help="move alias champion to a version that passes the gate")
    parser.add_argument("model", help="the registered model's name")
    parser.add_argument("version", help="the registered version number to move alias champion to")
    add_gate_flags(parser, GATE_FLAGS)
    parser.add_argument(
        "--live",
        action="store_true",
        help="also gate on live traffic: the `congruent serve --shadow VERSION` session beside the champion "
        "must hold --min-live labelled pairs whose NFR is within --max-nfr (its upper bound with --confidence)",
    )
    parser.set_defaults(func=run)
