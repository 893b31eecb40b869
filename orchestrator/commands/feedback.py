"""`congruent feedback MODEL FILE [--url URL]`: labels that arrived after the requests, joined to
the live pairs by request id: FILE is a CSV with columns `id` and `label` (a class id), sent to the
serving endpoint of MODEL in batches."""

from __future__ import annotations

import argparse
import csv

from orchestrator.commands.options import fail

BATCH = 1000  # labels per POST /feedback


def read_labels(path: str) -> list[dict]:
    """{id, label} rows of a CSV with a header naming `id` and `label`; ValueError in one line."""
    with open(path, newline="", encoding="utf-8") as file:
        reader = csv.DictReader(file)
        if reader.fieldnames is None or not {"id", "label"} <= set(reader.fieldnames):
            raise ValueError(f"{path}: a CSV whose header names `id` and `label`")
        rows = []
        for line, row in enumerate(reader, start=2):
            try:
                rows.append({"id": row["id"], "label": int(row["label"])})
            except (TypeError, ValueError):
                raise ValueError(f"{path}, line {line}: label {row['label']!r} is not a class id") from None
    if not rows:
        raise ValueError(f"{path}: no labels")
    return rows


def run(args: argparse.Namespace) -> int:
    import json
    import urllib.error
    import urllib.request

    from orchestrator.driver.serve import post

    try:
        rows = read_labels(args.file)
    except (OSError, ValueError) as e:
        return fail("feedback", str(e))
    url = args.url.rstrip("/")
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=30) as response:
            health = json.loads(response.read())
        if health.get("model") != args.model:
            return fail("feedback", f"{url} serves {health.get('model')!r}, not {args.model!r}")
        counts = {"accepted": 0, "unmatched": 0, "unchanged": 0, "relabelled": 0}
        for start in range(0, len(rows), BATCH):
            body = {"labels": rows[start : start + BATCH], "relabel": args.relabel}
            answer = post(f"{url}/feedback", body, scope="feedback")
            counts = {key: n + int(answer.get(key, 0)) for key, n in counts.items()}
    except urllib.error.HTTPError as e:
        return fail("feedback", f"{url}: {e.code} {json.loads(e.read() or b'{}').get('error', e.reason)}")
    except (urllib.error.URLError, OSError) as e:
        return fail("feedback", f"{url}: cannot reach the endpoint ({e})")
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
