"""Flips by slice: an update's counts (workers/metrics.py `FlipCounts`) within each value of each
slice column, so a global NFR of 2 % cannot hide a slice where the update flips 15 %.

A slice is (column, value): the samples whose `column` holds `value`. Counts are global within a
slice (every sample of it once); NFR_s = negative flips in s / n_s, with its one-sided Wilson upper
bound (workers/confidence.py). A slice of fewer than `min_n` samples is reported but not gated
(`gated` False): its rate says little.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from workers.confidence import wilson_upper
from workers.metrics import FlipCounts
from workers.percent import percent

MIN_SLICE_N = 30  # samples a slice needs before a gate reads it


def slice_flip_counts(
    old: np.ndarray, new: np.ndarray, labels: np.ndarray, slices: Mapping[str, np.ndarray]
) -> dict[str, dict[str, FlipCounts]]:
    """{column: {value: FlipCounts of the samples with that value}} of class ids `old`, `new` against
    `labels`; `slices` holds one value per sample per column (None or "": the sample is in no slice
    of that column)."""
    out: dict[str, dict[str, FlipCounts]] = {}
    for column, values in slices.items():
        text = np.array(["" if v is None else str(v) for v in values], dtype=object)
        if len(text) != len(labels):
            raise ValueError(f"slice column {column!r} has {len(text)} values for {len(labels)} samples")
        by_value: dict[str, FlipCounts] = {}
        for value in sorted(set(text.tolist()) - {""}):
            keep = text == value
            by_value[value] = FlipCounts.of(old[keep], new[keep], labels[keep])
        out[column] = by_value
    return out


def slice_rows(
    counts: Mapping[str, Mapping[str, FlipCounts]], confidence: float = 0.95, min_n: int = MIN_SLICE_N
) -> list[dict[str, Any]]:
    """One row per slice, worst first (by NFR's upper bound among gated slices, then by NFR): column,
    value, n, ER of both, NFR, PFR, NFR's Wilson upper bound at `confidence`, and whether it is gated
    (n ≥ `min_n`)."""
    rows = []
    for column, by_value in counts.items():
        for value, c in by_value.items():
            if not c.n:
                continue
            rows.append(
                {
                    "column": column,
                    "value": value,
                    "n": c.n,
                    "er_old": c.old_errors / c.n,
                    "er_new": c.new_errors / c.n,
                    "nfr": c.negative / c.n,
                    "pfr": c.positive / c.n,
                    "nfr_upper": wilson_upper(c.negative, c.n, confidence),
                    "gated": c.n >= min_n,
                }
            )
    return sorted(rows, key=lambda r: (not r["gated"], -r["nfr_upper"], -r["nfr"], r["column"], r["value"]))


def worst_gated_slice(rows: list[dict[str, Any]], limit: float, on_bound: bool) -> dict[str, Any] | None:
    """The first gated row (of `slice_rows`) whose NFR — its upper bound with `on_bound` — exceeds
    `limit`; None when every gated slice keeps it."""
    key = "nfr_upper" if on_bound else "nfr"
    over = [r for r in rows if r["gated"] and r[key] > limit]
    return max(over, key=lambda r: r[key]) if over else None


def over_limit_words(row: dict[str, Any], limit: float, on_bound: bool) -> str:
    """A slice row over `limit` as the gate says it: "COL=VALUE NFR 12.50% > 10.00%" ("NFR upper
    bound" with `on_bound`)."""
    key, bound = ("nfr_upper", " upper bound") if on_bound else ("nfr", "")
    return f"{row['column']}={row['value']} NFR{bound} {percent(row[key])} > {percent(limit)}"


def slice_over_limit(
    old: np.ndarray,
    new: np.ndarray,
    labels: np.ndarray,
    slices: Mapping[str, np.ndarray],
    limit: float,
    confidence: float | None = None,
    min_n: int = MIN_SLICE_N,
) -> str | None:
    """The slice gate's words for the worst slice of at least `min_n` samples whose NFR (its Wilson
    upper bound with `confidence`) exceeds `limit` — "COL=VALUE NFR 12.50 % > 10.00 % on 40" — or
    None when every such slice keeps it: the rule `promote --max-slice-nfr` applies, on any split."""
    rows = slice_rows(slice_flip_counts(old, new, labels, slices), confidence or 0.95, min_n)
    worst = worst_gated_slice(rows, limit, confidence is not None)
    if worst is None:
        return None
    return f"{over_limit_words(worst, limit, confidence is not None)} on {worst['n']:,}"
