"""`congruent promote MODEL VERSION --max-nfr F [--max-er-increase F] [--confidence C] [--live]`: move
alias `champion` to a version only if its NFR against the current champion and its ER increase stay
within the limits (from the ledgers, no re-inference; with --confidence, their upper confidence
bounds; with --live, its NFR on labelled live traffic too), as a compare-and-set that holds when
promotions race; otherwise say why and exit 1."""

from __future__ import annotations

import argparse
import sys

from orchestrator.commands.options import fail, fraction


def run(args: argparse.Namespace) -> int:
    from mlflow.exceptions import MlflowException

    from orchestrator.tracking import promotion, store

    if args.min_live is not None and args.min_live < 1:
        return fail("promote", f"--min-live {args.min_live}: at least 1 labelled pair")
    if args.max_protected_flips < 0:
        return fail("promote", f"--max-protected-flips {args.max_protected_flips}: at least 0")
    if args.min_slice_n < 1:
        return fail("promote", f"--min-slice-n {args.min_slice_n}: at least 1 sample")
    store.configure()
    limits = promotion.GateLimits(
        args.max_nfr,
        args.max_er_increase,
        args.confidence,
        args.live,
        args.min_live,
        args.max_slice_nfr,
        args.min_slice_n,
        args.max_protected_flips,
    )
    try:
        verdict = promotion.promote(args.model, args.version, limits)
    except (promotion.RegistryError, MlflowException) as e:
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
    parser.add_argument(
        "--confidence",
        type=fraction(0.5, 0.9999),
        default=None,
        help="gate on the upper bounds at this confidence level (e.g. 0.95): Wilson for NFR, paired "
        "(Tango's score bound) for the ER increase; default: the point values",
    )
    parser.add_argument(
        "--live",
        action="store_true",
        help="also gate on live traffic: the `congruent serve --shadow VERSION` session beside the champion "
        "must hold --min-live labelled pairs whose NFR is within --max-nfr (its upper bound with --confidence)",
    )
    parser.add_argument(
        "--min-live",
        type=int,
        default=None,
        metavar="N",
        help="labelled live pairs --live asks for (default: the fewest whose Wilson bound, at --confidence or "
        "95 %%, can be within --max-nfr: 268 for 1 %%)",
    )
    parser.add_argument(
        "--max-slice-nfr",
        type=fraction(0, 1),
        default=None,
        help="largest NFR of any slice of the version's ledger (data.slice_columns / data.slices) with at "
        "least --min-slice-n samples, a fraction (its upper bound with --confidence); refused naming the slice",
    )
    parser.add_argument(
        "--min-slice-n",
        type=int,
        default=30,
        metavar="N",
        help="samples a slice needs to be gated by --max-slice-nfr (default 30)",
    )
    parser.add_argument(
        "--max-protected-flips",
        type=int,
        default=0,
        metavar="N",
        help="protected samples (`congruent protect`) the champion gets right that the version may get wrong (0)",
    )
    parser.set_defaults(func=run)
