"""What the gateway does with a canary's live evidence (canary.py's rule): after each batch of labels
it asks the ledger for the counts and, when the rule decides, withdraws the canary (every id back to
the champion at once, the session's run tagged why) or, with `auto_promote`, promotes it through the
registry's gate (`congruent promote --live`'s) and answers with it from then on. Decisions are one at
a time, and none holds a `/feedback` call past the call timeout. A gateway replica that restarts reads
a withdrawal back from the run (`restore`, bounded likewise), so a restart never routes users to a
withdrawn canary again."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from orchestrator.serving.canary import canary_decision
from orchestrator.serving.handles import version_handle, within
from pipelines.operations import PromoteSpec

logger = logging.getLogger("ray.serve")


async def decide(gateway: Any) -> dict[str, Any]:
    """Apply the rule to the ledger's counts now; the canary's status after it. One decision at a
    time (two batches of labels never promote twice), and none waits longer than the call timeout: a
    promotion still running then is awaited by the next batch's decision."""
    canary = gateway.canary
    async with canary.deciding:
        if canary.promotion is not None:
            await landed(gateway)
        elif canary.state in ("running", "passed"):
            timeout_s = gateway.settings.call_timeout_s
            figures = await within(gateway.ledger.figures.remote(), timeout_s)
            decision, reason = canary_decision(int(figures["negative_flips"]), int(figures["labelled"]), canary.rule)
            if decision == "withdraw":
                await withdraw(gateway, reason)
            elif decision == "pass" and canary.rule.auto_promote:
                await promote(gateway, reason)
            elif decision == "pass":
                canary.state, canary.reason = "passed", reason
            else:
                canary.reason = reason
    return canary.status()


async def withdraw(gateway: Any, reason: str) -> None:
    """Every id to the champion from now on; the shadows in flight finish first."""
    canary = gateway.canary
    if gateway.shadow is not None:
        await gateway.shadow.drain(timeout=gateway.settings.call_timeout_s)
    gateway.shadow = None
    canary.state, canary.reason = "withdrawn", reason
    logger.warning("canary v%s withdrawn: %s", canary.version, reason)
    await _tag(gateway.live_run, f"withdrawn: {reason}")


async def promote(gateway: Any, reason: str) -> None:
    """`congruent promote MODEL V --live` with the rule's limits, the ledger written first (the gate
    reads the session's chunks), in a thread of its own (`landed` takes its verdict)."""
    from orchestrator.tracking import promotion
    from workers.models.protected_scoring import protected_answers

    canary, rule = gateway.canary, gateway.canary.rule
    limits = PromoteSpec(  # the gate the rule was made from (driver/serve_command.py), at the rule's level
        max_nfr=rule.max_nfr,
        max_er_increase=rule.max_er_increase,
        confidence=rule.confidence,
        min_live=rule.min_labelled,
    )
    try:
        await within(gateway.ledger.flush.remote(), gateway.settings.call_timeout_s)
    except Exception as e:  # noqa: BLE001  # the store out of reach: tried at the next labels
        canary.state, canary.reason = "passed", f"{reason}; not promoted yet: {type(e).__name__}: {e}"
        return
    running = asyncio.ensure_future(
        asyncio.to_thread(promotion.promote, gateway.model, canary.version, limits, True, score=protected_answers)
    )
    canary.promotion = (running, reason)
    await landed(gateway)


async def landed(gateway: Any) -> None:
    """The promotion in flight's verdict, waited for at most the call timeout (never cancelled: the
    registry's compare-and-set decides, a later decision takes its verdict). Passed, the gateway
    answers with the new champion's replicas (the canary's own) at once, and the driver's follow loop
    retires the old champion's application."""
    canary = gateway.canary
    assert canary.promotion is not None
    running, reason = canary.promotion
    done, _ = await asyncio.wait({running}, timeout=gateway.settings.call_timeout_s)
    if not done:
        canary.state, canary.reason = "passed", f"{reason}; promotion under way (the registry's gate is still running)"
        return
    canary.promotion = None
    try:
        verdict = running.result()
    except Exception as e:  # noqa: BLE001  # the registry or the store out of reach: tried at the next labels
        canary.state, canary.reason = "passed", f"{reason}; not promoted yet: {type(e).__name__}: {e}"
        return
    if not verdict.passed:
        canary.state, canary.reason = "passed", f"{reason}; not promoted: {verdict.reason}"
        return
    handle = version_handle(gateway.model, canary.version)
    described = await within(handle.describe.remote(), gateway.settings.call_timeout_s)
    if gateway.shadow is not None:
        await gateway.shadow.drain(timeout=gateway.settings.call_timeout_s)
    gateway.champion, gateway.described, gateway.shadow = handle, described, None
    canary.state, canary.reason = "promoted", f"{reason}; promoted: {verdict.reason}"
    logger.warning("canary v%s promoted: %s", canary.version, verdict.reason)
    await _tag(gateway.live_run, f"promoted: {verdict.reason}")


async def restore(gateway: Any) -> None:
    """At a gateway replica's start: a canary its session withdrew stays withdrawn."""
    from orchestrator.tracking.live import canary_outcome

    if gateway.live_run is None:
        return
    try:  # bounded: every route waits for the replica's start
        outcome = await asyncio.wait_for(
            asyncio.to_thread(canary_outcome, gateway.live_run), gateway.settings.call_timeout_s
        )
    except Exception:  # the store out of reach or slow: the canary answers as deployed
        logger.exception("canary: the session's run could not be read in time; serving the canary as deployed")
        return
    if outcome.startswith("withdrawn: "):
        gateway.shadow = None
        gateway.canary.state, gateway.canary.reason = "withdrawn", outcome.removeprefix("withdrawn: ")


async def _tag(run_id: str | None, outcome: str) -> None:
    from orchestrator.tracking.live import record_canary_outcome

    if run_id is None:
        return
    try:
        await asyncio.to_thread(record_canary_outcome, run_id, outcome)
    except Exception:  # the decision stands; only its record is missing
        logger.exception("canary: the session's run could not be tagged %r", outcome[:200])
