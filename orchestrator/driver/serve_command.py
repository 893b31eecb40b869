"""`congruent serve`'s flow around the served application (driver/serve.py starts, swaps and stops
it): a canary's rule from the promotion gate, and the loop that follows the champion alias and the
canary until Ctrl-C, each event said in one line through `say`. What the command builds or checks of
serving/ (its settings, who may reach it) comes through here, so commands import only the driver."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

from orchestrator.driver import serve as served_app
from orchestrator.driver.serve import NotPlaced, Served
from orchestrator.host import worker_env
from orchestrator.policy.promotion import min_live_pairs
from orchestrator.serving.access import (
    SCOPE_ENV,
    TOKEN_ENV,
    open_beyond_this_machine,
    scopes_not_their_own,
    shared_scopes,
)
from orchestrator.serving.settings import CanaryRule, RequestLimits, Resources, ServeSettings
from orchestrator.tracking.promotion import REGISTRY_ERRORS
from orchestrator.tracking.version_record import SHOWN_CONFIDENCE
from orchestrator.tracking.version_refs import RegistryError
from pipelines.operations import PromoteSpec

Say = Callable[[str], None]

__all__ = [  # the flow, and what `congruent serve` takes of serving/ and tracking/
    "SCOPE_ENV",
    "TOKEN_ENV",
    "CanaryRule",
    "RegistryError",
    "RequestLimits",
    "Resources",
    "ServeSettings",
    "canary_rule",
    "follow",
    "follow_canary",
    "follow_champion",
    "open_beyond_this_machine",
    "scopes_not_their_own",
    "shared_scopes",
    "storage_credentials_here",
]


def storage_credentials_here() -> bool:
    """Whether this environment holds storage settings a foreground serve hands its replicas
    (serving/credentials.py); a `--detach`ed one hands none over."""
    return bool(worker_env())


def canary_rule(gate: PromoteSpec, fraction: float, auto_promote: bool) -> CanaryRule:
    """The rule of `--canary` (serving/canary.py) from the gate: its bounds at the gate's confidence,
    else the level `versions` shows (a canary is always decided on bounds), decided at `min_live`
    labelled pairs, by default the fewest whose Wilson bound can be within max_nfr (as `promote --live`)."""
    level = gate.confidence or SHOWN_CONFIDENCE
    return CanaryRule(fraction, gate.max_nfr, min_live_pairs(gate, level), level, auto_promote, gate.max_er_increase)


def follow(served: Served, every_s: float, place_s: float, say: Say = print) -> Served:
    """Check the canary and the champion alias every `every_s` seconds until Ctrl-C; what is served then."""
    unplaced: set[str] = set()
    try:
        while True:
            time.sleep(every_s)
            served = follow_canary(served, say)
            served = follow_champion(served, place_s, unplaced, say)
    except KeyboardInterrupt:
        return served


def follow_canary(served: Served, say: Say = print) -> Served:
    """The canary withdrawn by the gateway (its live NFR): said once, its application deleted."""
    try:
        reason = served_app.canary_withdrawn(served)
    except OSError as e:  # the endpoint busy: asked again at the next check
        say(f"{served.model}: the endpoint did not answer ({type(e).__name__}); checking the canary again later")
        return served
    if reason is None:
        return served
    say(f"{served.model}: canary v{served.candidate} withdrawn, every id answered by v{served.champion}: {reason}")
    return replace(served, candidate=None)


def follow_champion(
    served: Served, place_s: float = 120.0, unplaced: set[str] | None = None, say: Say = print
) -> Served:
    """Swap the served champion when the registry's alias moved (a promotion); the registry being out
    of reach, or a swap that failed, is said and tried again at the next check, while serving goes on.
    A version whose replicas could not be placed within `place_s` is rolled back (its application
    deleted, the old champion and its shadow served on), said once, and added to `unplaced`: not tried
    again until the alias names another version (or serve restarts)."""
    unplaced = set() if unplaced is None else unplaced
    try:
        moved = served_app.champion_moved(served)
    except (*REGISTRY_ERRORS, OSError) as e:  # MLflow down, the alias removed: keep serving
        say(f"{served.model}: the registry did not answer ({type(e).__name__}); serving v{served.champion}")
        return served
    if moved is None or moved in unplaced:
        return served
    ended = f"; the live session of v{served.candidate} ended" if served.candidate else ""
    say(f"{served.model}: champion moved to v{moved}: swapping v{served.champion} for it{ended}")
    try:
        swapped = served_app.swap_champion(served, moved, place_s)
    except NotPlaced as e:
        unplaced.add(moved)
        shadow = f" shadowing v{served.candidate}" if served.candidate else ""
        say(f"{served.model}: rolled back, serving v{served.champion}{shadow} until the alias moves again: {e}")
        return served
    except (RegistryError, OSError, ValueError, RuntimeError) as e:  # a deploy or the gateway failed: retried
        say(f"{served.model}: the swap failed ({type(e).__name__}: {e}); tried again at the next check")
        return served
    say(f"{served.model}: serving champion v{moved} at {served.url}")
    return swapped
