"""`congruent predict MODEL@ALIAS|MODEL/N DATA --out DIR [--compare MODEL/N]`: a registered version's
answers on a table or a folder of images, scored on Ray Data, written as prediction files; with
`--compare`, a second version in the same pass and their disagreement, NFR and PFR."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from orchestrator.commands.options import fail, json_option, positive, quiet_option, ray_address
from orchestrator.views.format import percent


def format_summary(summary: dict[str, Any]) -> str:
    """The summary as a few lines: rows, failures and ER per version; the pair's figures."""
    lines = []
    for key in ("old", "new"):
        if key not in summary:
            continue
        counts = summary[key]
        er = (
            f", ER {percent(counts['error_rate'])} on {counts['labelled']:,} labelled"
            if counts["error_rate"] is not None
            else ""
        )
        failed = f", {counts['failed']:,} failed" if counts["failed"] else ""
        lines.append(
            f"{summary['versions'][key]}: {counts['rows']:,} rows{failed}{er} -> {summary['predictions'][key]}"
        )
    pair = summary.get("pair")
    if pair:
        versions = f"{summary['versions']['old']} -> {summary['versions']['new']}"
        line = f"{versions}: disagree on {percent(pair['disagreement'])} of {pair['compared']:,}"
        if pair["nfr"] is not None:
            line += f"; NFR {percent(pair['nfr'])}, PFR {percent(pair['pfr'])} on {pair['n']:,} labelled"
        lines.append(line)
    rate = summary["rows_per_second"]
    lines.append(f"{summary['seconds']:.1f} s" + (f" ({rate:,.0f} rows/s)" if rate else ""))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from orchestrator.driver.predict import PredictError, Scoring, prepare_prediction, run_prediction

    quiet = args.quiet or args.json

    def progress(line: str) -> None:
        if not quiet:
            print(line, file=sys.stderr, flush=True)

    scoring = Scoring(args.batch_size, args.concurrency, args.cpus_per_actor, args.gpus_per_actor)
    try:
        columns = (args.text_column, args.label_column, args.id_column)
        job = prepare_prediction(args.model, args.compare, args.data, args.out, columns)
        summary = run_prediction(job, args.ray_address, scoring, progress)
    except PredictError as error:
        return fail("predict", str(error))
    print(json.dumps(summary) if args.json else format_summary(summary))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "predict",
        parents=[quiet_option(), json_option("print the summary as JSON"), ray_address()],
        help="score data with a registered version on Ray Data (and compare two versions' flips)",
        description=(
            "Score a table (CSV/TSV/JSONL/Parquet: one file, a folder or glob of shards, local or s3://) "
            "or a folder of images with a registered version, on Ray Data: files read by Ray tasks, "
            "rows scored by an actor pool. Writes OUT/NAME-vN/part-*.parquet (id, label, class, name, "
            "probability, error) and OUT/summary.json; prints ER where the data has labels. With "
            "--compare, the other version is scored in the same pass: disagreement, and NFR/PFR of "
            "MODEL against it where labels exist. A row that cannot be scored is written with its "
            "error and counted, not fatal."
        ),
    )
    parser.add_argument("model", metavar="MODEL@ALIAS|MODEL/N", help="the version to score with (the new one)")
    parser.add_argument("data", metavar="DATA", help="a table, a folder or glob of table shards, or a folder of images")
    parser.add_argument("--out", required=True, metavar="DIR", help="folder for the prediction files and summary.json")
    parser.add_argument(
        "--compare",
        metavar="MODEL/N|URI",
        default=None,
        help="also score this version (the old one) and count flips against it: a version Congruent registered, or "
        "any MLflow classifier (models:/NAME@ALIAS, runs:/ID/PATH) answering texts with class names",
    )
    parser.add_argument("--batch-size", type=positive(int), default=256, help="rows an actor scores at a time (256)")
    parser.add_argument("--concurrency", type=positive(int), default=1, help="scoring actors (1)")
    parser.add_argument("--cpus-per-actor", type=positive(float), default=1.0, help="CPUs each actor reserves (1)")
    parser.add_argument("--gpus-per-actor", type=float, default=0.0, help="GPUs each actor reserves (0: CPU)")
    parser.add_argument("--text-column", default=None, help="the texts' column (default: the version's spec's)")
    parser.add_argument(
        "--label-column", default=None, help="the labels' column (default: the spec's, used when the data has it)"
    )
    parser.add_argument("--id-column", default=None, help="the samples' id column (default: the spec's, else the text)")
    parser.set_defaults(func=run)
