"""`congruent feedback MODEL FILE [--url URL]`: labels that arrived after the requests, joined to
the live pairs by request id: FILE is a CSV with columns `id` and `label` (a class id), sent to the
serving endpoint of MODEL in batches."""

from __future__ import annotations

import argparse

from orchestrator.commands.options import fail


def run(args: argparse.Namespace) -> int:
    from orchestrator.driver.feedback import read_labels, send_labels

    try:
        rows = read_labels(args.file)
        counts = send_labels(args.url, args.model, rows, args.relabel)
    except (OSError, ValueError) as e:
        return fail("feedback", str(e))
    print(
        f"{args.model}: {len(rows)} labels sent: {counts['accepted']} kept, {counts['relabelled']} replaced, "
        f"{counts['unchanged']} for ids labelled already (the first label stands; --relabel replaces it), "
        f"{counts['unmatched']} for ids this session did not shadow (not kept)"
    )
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "feedback",
        help="send labels of served requests (by request id) to the live ledger",
        description="Labels that arrived later, joined to the served requests by id (congruent serve).",
    )
    parser.add_argument("model", help="the served model's name")
    parser.add_argument("file", help="CSV with columns id, label")
    parser.add_argument(
        "--relabel",
        action="store_true",
        help="replace the labels ids have already (logged on the session's run); without it the first stands",
    )
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="the serving endpoint (http://127.0.0.1:8000)")
    parser.set_defaults(func=run)
