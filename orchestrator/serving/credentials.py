"""How the replicas of `congruent serve` get this environment's storage credentials (AWS_*,
MLFLOW_S3_*) without any of them reaching the cluster's visible or shared state.

A deployment's `runtime_env.env_vars` are shown to anyone who can read the cluster (the dashboard,
Serve's REST output, the actor table), and the cluster's key-value store is readable and writable by
every holder of the Ray token under any key. So the serve process puts the settings in its own
object store (`hand_over`: an immutable object it owns) and gives each replica only a reference to
it, at construction (`Sealed`, in the deployment's arguments); a replica reads it once, before it
opens anything, and applies the storage settings only (`load_into_replica`): no planted
`MLFLOW_TRACKING_URI`. The object goes with the process that owns it: whatever way `serve` ends (its
stop, Ctrl-C, a failed start, SIGKILL), nothing of it is left in the cluster. A `--detach`ed
application outlives its serve, so it is handed nothing: its replicas use their Ray nodes' own
storage credentials (the stack's nodes have theirs).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from orchestrator.host import FORWARDED_ENV_PREFIXES

STORAGE_PREFIXES = FORWARDED_ENV_PREFIXES  # what a replica takes from them: storage settings, nothing else


class CredentialsGone(RuntimeError):
    """The serve process that handed the credentials over has exited (in one line)."""


@dataclass(frozen=True)
class Sealed:
    """A reference to storage settings in the serve process's object store. Ray passes a reference
    nested in an argument as it is (a top-level one is resolved into its value first)."""

    ref: Any  # ray.ObjectRef


def storage_only(settings: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in settings.items() if k.startswith(STORAGE_PREFIXES)}


def hand_over(settings: dict[str, str]) -> Sealed | None:
    """`settings`' storage entries in this process's object store (it has joined the cluster), for the
    replicas it deploys; None when there are none."""
    import ray

    storage = storage_only(settings)
    return Sealed(ray.put(storage)) if storage else None


def load_into_replica(sealed: Sealed | None, timeout_s: float = 60.0) -> None:
    """In a replica: the storage settings `sealed` refers to, into this process's environment (None:
    nothing, the node's own are used). CredentialsGone when their owner, the serve process, has ended."""
    if sealed is None:
        return
    import ray
    from ray.exceptions import GetTimeoutError, ObjectLostError

    try:
        stored = ray.get(sealed.ref, timeout=timeout_s)
    except (ObjectLostError, GetTimeoutError):  # OwnerDiedError is an ObjectLostError
        raise CredentialsGone(
            "the storage credentials went with the `congruent serve` that started this application; "
            "serve it again (or give the Ray nodes their own storage credentials)"
        ) from None
    os.environ.update(storage_only({str(k): str(v) for k, v in dict(stored).items()}))
