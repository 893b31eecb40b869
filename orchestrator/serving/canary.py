"""The canary's rule: when the live evidence withdraws a canary, and when it has shown enough to be
promoted. A pure function of the counts (tensor-free: k flips of n labelled pairs), so the gateway
applies it after every batch of labels and a test checks it against hand-computed bounds.

With the canary's NFR seen as k negative flips of n labelled pairs (champion right, candidate wrong,
workers/confidence.py's Wilson bounds at `confidence`):

- **withdraw** as soon as the lower bound exceeds `max_nfr`: the canary flips more than allowed
  whatever the next labels show, so it stops answering users now, on however few pairs;
- once `min_labelled` pairs are labelled the canary is decided: its upper bound ≤ `max_nfr` **passes**
  (promoted with `auto_promote`, through the same gate as `congruent promote --live`), above it
  **withdraws** — it could not show it stays within the limit on the evidence asked for;
- otherwise **wait** for more labels.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Literal

from orchestrator.serving.requests import shadowed
from orchestrator.serving.settings import CanaryRule
from workers.confidence import wilson_lower, wilson_upper
from workers.percent import percent, short_percent

Decision = Literal["wait", "withdraw", "pass"]


def canary_decision(flips: int, labelled: int, rule: CanaryRule) -> tuple[Decision, str]:
    """(decision, why in one clause) for k = `flips` of n = `labelled` pairs (module docstring)."""
    if labelled == 0:
        return "wait", "no labelled canary pair yet"
    level = short_percent(rule.confidence)
    seen = f"NFR {flips}/{labelled} = {percent(flips / labelled)}"
    lower = wilson_lower(flips, labelled, rule.confidence)
    if lower > rule.max_nfr:
        return "withdraw", f"{seen}, its {level} lower bound {percent(lower)} > max {percent(rule.max_nfr)}"
    if labelled < rule.min_labelled:
        return "wait", f"{seen}; {rule.min_labelled - labelled} more labelled pairs before it is decided"
    upper = wilson_upper(flips, labelled, rule.confidence)
    bound = f"{seen}, its {level} upper bound {percent(upper)}"
    if upper > rule.max_nfr:
        return "withdraw", f"{bound} > max {percent(rule.max_nfr)} on {labelled} labelled pairs"
    return "pass", f"{bound} ≤ max {percent(rule.max_nfr)} on {labelled} labelled pairs"


@dataclass
class CanaryState:
    """Where a served canary stands: `running` (answering its share, undecided), `passed` (within the
    limit, still answering: promote it, or `auto_promote`), `withdrawn` (every id back to the
    champion), `promoted` (the champion now), `ended` (the champion moved to another version)."""

    rule: CanaryRule
    version: str
    state: str = "running"
    reason: str = ""
    deciding: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)  # one decision at a time
    promotion: tuple[asyncio.Future[Any], str] | None = field(default=None, repr=False)  # (in flight, why)

    def answers(self, sample_id: str) -> bool:
        """Whether the canary answers this id: its share of ids, decided by the id alone."""
        return self.state in ("running", "passed") and shadowed(sample_id, self.rule.fraction)

    def status(self) -> dict[str, object]:
        return {"version": self.version, "fraction": self.rule.fraction, "state": self.state, "reason": self.reason}
