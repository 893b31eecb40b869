"""`congruent feedback`'s work: the labels of a CSV with columns `id` and `label` (a class id), read
by the table formats' CSV reader (workers/data/formats/), sent to a serving endpoint in batches."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

from workers.data.formats.tables import table_format

BATCH = 1000  # labels per POST /feedback
CSV = ".csv"  # a labels file is read as CSV, whatever its name


def read_labels(path: str) -> list[dict]:
    """{id, label} rows of a CSV with a header naming `id` and `label`; ValueError in one line (an
    unreadable file: OSError)."""
    raw = Path(path).read_bytes()
    problems: list[str] = []
    rows = table_format(CSV).rows(path, raw, CSV, "utf-8", "id", "label", problems)[0] if raw.strip() else []
    if problems or not raw.strip():
        raise ValueError(f"{path}: a CSV whose header names `id` and `label`")
    labels = []
    for where, sample, label in rows:
        try:
            labels.append({"id": sample, "label": int(str(label))})
        except ValueError:
            raise ValueError(f"{path}, {where}: label {label!r} is not a class id") from None
    if not labels:
        raise ValueError(f"{path}: no labels")
    return labels


def send_labels(url: str, model: str, rows: list[dict], relabel: bool) -> dict[str, int]:
    """Send `rows` to the endpoint at `url` serving `model`, BATCH at a time: how many it kept,
    replaced, found labelled already and did not match; ValueError in one line when the endpoint
    serves another model, refuses or cannot be reached."""
    from orchestrator.driver.serve import gateway_status, post

    url = url.rstrip("/")
    try:
        health = gateway_status(url)
        if health.get("model") != model:
            raise ValueError(f"{url} serves {health.get('model')!r}, not {model!r}")
        counts = {"accepted": 0, "unmatched": 0, "unchanged": 0, "relabelled": 0}
        for start in range(0, len(rows), BATCH):
            answer = post(
                f"{url}/feedback", {"labels": rows[start : start + BATCH], "relabel": relabel}, scope="feedback"
            )
            counts = {key: n + int(answer.get(key, 0)) for key, n in counts.items()}
    except urllib.error.HTTPError as e:
        raise ValueError(f"{url}: {e.code} {json.loads(e.read() or b'{}').get('error', e.reason)}") from None
    except (urllib.error.URLError, OSError) as e:
        raise ValueError(f"{url}: cannot reach the endpoint ({e})") from None
    return counts
