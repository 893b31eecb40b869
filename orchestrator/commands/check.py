"""`congruent check SPEC.yaml...`: every check `congruent run` makes before it starts Ray — the spec's
fields, the data (columns, classes, sizes), the old checkpoint, registry references, where the
models start, the storage, what the cluster can hold — without starting Ray or training anything.
Every problem found is one line; exit 2 when there is any. Specs given together are checked in
order as a chain: a later spec's `old: MODEL@ALIAS` of a model an earlier one registers is checked
against that spec."""

from __future__ import annotations

import argparse

from orchestrator.commands.options import ray_address, report_checks


def run(args: argparse.Namespace) -> int:
    return report_checks("check", args.specs, args.ray_address, args.quiet)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "check",
        help="check update specs as `run` does before it starts, without Ray or training",
        parents=[
            ray_address(
                "GCS address of a Ray cluster whose resources the spec must fit (default: RAY_ADDRESS, else this "
                "machine's cores, as the embedded Ray of `run` would have them; no Ray is started)"
            )
        ],
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    parser.add_argument("specs", metavar="SPEC.yaml", nargs="+", help="specs, in chain order")
    parser.add_argument("--quiet", action="store_true", help="print only the problems")
    parser.set_defaults(func=run)
