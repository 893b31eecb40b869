"""A serving session's live figures as a table row: `congruent versions` and the HTML report."""

from __future__ import annotations

from typing import Any

from orchestrator.views.format import percent

LIVE_HEADERS = [
    "champion",
    "shadow",
    "state",
    "pairs",
    "disagree",
    "≥",
    "≤",
    "labelled",
    "ER",
    "ER shadow",
    "NFR",
    "NFR ≤",
    "PFR",
]


def live_row(s: dict[str, Any]) -> list[str]:
    """One serving session's figures as a table row."""
    return [
        f"v{s['champion']}",
        f"v{s['candidate']}",
        s["status"].lower(),
        str(s["pairs"]),
        percent(s["disagreement"]),
        percent(s["disagreement_lower"]),
        percent(s["disagreement_upper"]),
        str(s["labelled"]),
        percent(s["champion_error_rate"]),
        percent(s["candidate_error_rate"]),
        percent(s["nfr"]),
        percent(s["nfr_upper"]),
        percent(s["pfr"]),
    ]
