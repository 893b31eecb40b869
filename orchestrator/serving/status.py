"""What the gateway tells about itself, by who may know it: `GET /healthz` says only whether it
answers (open: load balancers and orchestrators probe it), `GET /status` (the feedback scope, as
`/live`) what it serves, its shadow's queues and counts and the canary's state and figures, which a
client that may only predict must not see (a canary's live NFR tells it how close its labels are to
a decision)."""

from __future__ import annotations

from typing import Any

HEALTHY = {"status": "ok"}


def gateway_status(gateway: Any, version: str) -> dict[str, Any]:
    """The `Gateway`'s state (deployments.py) serving champion `version`."""
    shadow = gateway.shadow
    return {
        "status": "ok",
        "model": gateway.model,
        "version": version,
        "shadow": gateway.candidate_version if shadow else None,
        "shadow_fraction": gateway.settings.shadow_fraction if shadow else None,
        "shadow_failures": shadow.failures if shadow else 0,
        "samples_queued_for_the_shadow": len(shadow.queued) if shadow else 0,
        "bytes_queued_for_the_shadow": shadow.queued_bytes if shadow else 0,
        "samples_the_shadow_could_not_read": shadow.unreadable if shadow else 0,
        "pairs_waiting_for_the_ledger": len(shadow.unsent) if shadow else 0,
        "pairs_dropped": shadow.dropped if shadow else 0,
        "answered_by_another_version": gateway.swapped,
        "canary": gateway.canary.status() if gateway.canary else None,
    }
