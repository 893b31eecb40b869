"""`congruent compare --labels Y.npy A.npy B.npy [C.npy ...] [--json]` (or `congruent compare A/ B/`:
prediction folders or ledgers by sample id): regression metrics between saved prediction files (ER
of each, NFR / PFR / Rel-NFR of each consecutive pair, the pairwise NFR matrix)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from orchestrator.commands.options import fail, json_option, positive
from orchestrator.views.format import percent


def format_comparison(result: dict[str, Any], names: Sequence[str]) -> str:
    """Human-readable rendering of a `compare_predictions` result; names label the versions."""
    from orchestrator.views.tables import table

    versions = range(len(result["error_rate"]))
    lines = [
        f"{result['n']} samples, {len(names)} prediction files",
        "",
        "Error rate (ER)",
        table(["#", "file", "ER"], [[str(v), names[v], percent(result["error_rate"][v])] for v in versions], left=2),
        "",
        "Consecutive updates (old -> new)",
        table(
            ["old", "new", "NFR", "PFR", "Rel-NFR"],
            [
                [
                    str(p["old"]),
                    str(p["new"]),
                    percent(p["nfr"]),
                    percent(p["pfr"]),
                    percent(p["rel_nfr"], none="undefined"),
                ]
                for p in result["pairs"]
            ],
            left=0,
        ),
        "",
        "NFR matrix (rows = old, columns = new)",
        table(
            ["old\\new", *map(str, versions)],
            [[str(i), *map(percent, result["nfr_matrix"][i])] for i in versions],
            left=0,
        ),
    ]
    return "\n".join(lines)


SLICES_SHOWN = 10  # the worst slices printed per pair


def format_slices(pairs: list[dict[str, Any]]) -> str:
    """The worst slices of each consecutive pair (gated ones first), as tables."""
    from orchestrator.views.tables import slice_table

    lines = []
    for pair in pairs:
        lines += [
            "",
            f"Worst slices, {pair['old']} -> {pair['new']} (NFR's 95 % upper bound; * fewer samples than gated)",
            slice_table(pair["slices"], SLICES_SHOWN),
        ]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from orchestrator.driver.comparison import InputError, InputsDisagree, compared

    if len(args.predictions) < 2:
        return fail("compare", "needs at least two prediction files (old and new)")
    try:
        result = compared(args.predictions, args.labels, args.slices, args.min_slice_n)
    except (InputError, InputsDisagree) as error:
        return fail("compare", str(error))
    text = format_comparison(result, args.predictions) + (format_slices(result["slices"]) if "slices" in result else "")
    print(json.dumps(result) if args.json else text)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "compare",
        parents=[json_option("print the result as JSON")],
        help="regression metrics (ER, NFR, PFR, Rel-NFR) between prediction files",
        description=(
            "Compare saved predictions of successive model versions on the same labels "
            "(by position, or joined by sample id)."
        ),
    )
    parser.add_argument(
        "--labels", default=None, metavar="LABELS.npy", help="1-D non-negative integer labels (for .npy predictions)"
    )
    parser.add_argument(
        "predictions",
        nargs="+",
        metavar="PREDICTIONS",
        help="two or more, oldest first: .npy files of 1-D integer class ids or 2-D float logits (with "
        "--labels), or predictions by sample id: `congruent predict` folders, .parquet shards, ledgers, "
        "models:/NAME/VERSION (a registered version's ledger; for a model Congruent did not train, its answers "
        "as an update against it recorded them), or live:RUN_ID/champion and live:RUN_ID/candidate, the sides "
        "of a serving session (their labels inside; compared on the samples all of them hold)",
    )
    parser.add_argument(
        "--slices",
        default=None,
        metavar="FILE",
        help="a table of `id` (sample keys: an id column's value, a text, an image's path) and slice columns: "
        "flips per slice value of each consecutive pair (with predictions by id)",
    )
    parser.add_argument(
        "--min-slice-n",
        type=positive(int),
        default=30,
        help="samples a slice needs to be gated; smaller ones are shown, marked * (30)",
    )
    parser.set_defaults(func=run)
