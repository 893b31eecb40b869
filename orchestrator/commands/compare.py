"""`congruent compare --labels Y.npy A.npy B.npy [C.npy ...] [--json]` (or `congruent compare A/ B/`:
prediction folders or ledgers by sample id): regression metrics between saved prediction files (ER
of each, NFR / PFR / Rel-NFR of each consecutive pair, the pairwise NFR matrix)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from orchestrator.commands.options import fail, json_option
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


def run(args: argparse.Namespace) -> int:
    from orchestrator.driver.compare import (
        InputError,
        aligned_predictions,
        by_id,
        compare_predictions,
        load_labels,
        load_prediction_file,
    )

    if len(args.predictions) < 2:
        return fail("compare", "needs at least two prediction files (old and new)")
    try:
        if by_id(args.predictions):
            if args.labels:
                return fail("compare", "prediction files by id carry their labels: drop --labels")
            labels, predictions = aligned_predictions(args.predictions)
        elif args.labels is None:
            return fail(
                "compare", ".npy predictions need --labels LABELS.npy, their labels (see congruent compare --help)"
            )
        else:
            labels = load_labels(args.labels)
            predictions = [
                load_prediction_file(path, n=len(labels), num_classes=int(labels.max()) + 1)
                for path in args.predictions
            ]
    except InputError as error:
        return fail("compare", str(error))
    result = compare_predictions(labels, predictions)
    print(json.dumps(result) if args.json else format_comparison(result, args.predictions))
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
        "or live:RUN_ID/champion and live:RUN_ID/candidate, the sides of a serving session (their labels "
        "inside; compared on the samples all of them hold)",
    )
    parser.set_defaults(func=run)
