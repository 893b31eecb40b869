"""Figures for docs/reliability.md: reliability tests append one JSON line per fault injected or
bad input tried to the file named by `CONGRUENT_RELIABILITY_RECORDS` (when set; otherwise nothing
is written). `python -m benchmarks.code.reliability` sets it, runs those tests and writes the report."""

from __future__ import annotations

import json
import os
import time

RECORDS_ENV = "CONGRUENT_RELIABILITY_RECORDS"


def record(kind: str, **fields) -> None:
    """Append {"kind": kind, "time": …, "test": the running test's node id, **fields} to the records
    file, if one is configured."""
    path = os.environ.get(RECORDS_ENV)
    if not path:
        return
    test = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]
    with open(path, "a") as file:
        file.write(json.dumps({"kind": kind, "time": time.time(), "test": test, **fields}, default=str) + "\n")
