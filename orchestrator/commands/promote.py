"""`congruent promote MODEL VERSION --max-nfr F [--max-er-increase F]`: move alias `champion` to a
version only if its NFR against the current champion and its ER increase stay within the limits
(from the ledgers, no re-inference); otherwise say why and exit 1."""

from __future__ import annotations

import argparse
import sys

from orchestrator.commands.options import fail, fraction


def run(args: argparse.Namespace) -> int:
    from mlflow.exceptions import MlflowException

    from orchestrator.tracking import registry, store

    store.configure()
    try:
        registry.resolve(f"{args.model}/{args.version}")
        passed, why = registry.gate(args.model, args.version, args.max_nfr, args.max_er_increase)
    except (registry.RegistryError, MlflowException) as e:
        return fail("promote", str(e))
    if not passed:
        print(f"{args.model} v{args.version} NOT promoted: {why}", file=sys.stderr)
        return 1
    registry.set_champion(args.model, args.version)
    print(f"{args.model} v{args.version} is now champion: {why}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("promote", help="move alias champion to a version that passes the gate")
    parser.add_argument("model", help="the registered model's name")
    parser.add_argument("version", help="the registered version number to move alias champion to")
    parser.add_argument(
        "--max-nfr",
        type=fraction(0, 1),
        required=True,
        help="largest NFR against the champion, a fraction in [0, 1] (0.02 = 2 %%)",
    )
    parser.add_argument(
        "--max-er-increase",
        type=fraction(-1, 1),
        default=0.0,
        help="largest ER increase over the champion, a fraction in [-1, 1] (default 0)",
    )
    parser.set_defaults(func=run)
