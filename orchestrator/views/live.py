"""A serving session's live figures as a table row: `congruent versions` and the HTML report."""

from __future__ import annotations

from typing import Any

from orchestrator.views.format import percent

LIVE_HEADERS = [
    "champion",
    "candidate",
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
        f"v{s['candidate']}" + (f" canary {s['canary']:.0%}" if s.get("canary") is not None else ""),
        "refused (chunks changed)"  # its chunks are not the ones its ledger wrote (tracking/live_chain.py)
        if s.get("problem")
        else (s.get("canary_outcome") or "").split(":")[0] or s["status"].lower(),  # a canary's: withdrawn, promoted
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
