"""How the replicas of `congruent serve` get this environment's storage credentials (AWS_*,
MLFLOW_S3_*) without any of them reaching the cluster's visible state.

A deployment's `runtime_env.env_vars` are shown to anyone who can read the cluster: the dashboard,
Serve's applications REST output (`serve status`, `/api/serve/applications/`), the replicas' actor
table. So the settings go to the cluster's internal key-value store (the GCS, where Ray keeps a job's
working_dir package too: what `submit --env-from-here` relies on, jobs/credentials.py) under a key
named by the model, and the replicas are given only that key's name; each replica reads them into
its own environment before it opens anything (`load_into_replica`). `congruent serve --stop` and the
end of a foreground serve delete the key.
"""

from __future__ import annotations

import json
import os

KEY_ENV = "CONGRUENT_SERVE_CREDENTIALS_KEY"


def key_of(model: str) -> str:
    return f"congruent-serve-credentials:{model}"


def publish(model: str, settings: dict[str, str]) -> dict[str, str]:
    """Put `settings` in the cluster's key-value store for `model`'s replicas (this process has joined
    the cluster); the environment they are given instead: the key's name (none without settings)."""
    from ray.experimental.internal_kv import _internal_kv_put

    if not settings:
        return {}
    _internal_kv_put(key_of(model), json.dumps(settings).encode(), overwrite=True)
    return {KEY_ENV: key_of(model)}


def load_into_replica() -> None:
    """In a replica: the settings its key names, into this process's environment (none: nothing)."""
    key = os.environ.get(KEY_ENV)
    if not key:
        return
    from ray.experimental.internal_kv import _internal_kv_get

    stored = _internal_kv_get(key)
    if stored is None:
        raise RuntimeError(f"the serving credentials {key} are gone from the cluster (the model was stopped)")
    os.environ.update({str(k): str(v) for k, v in json.loads(stored).items()})


def withdraw(model: str) -> None:
    """Delete `model`'s settings from the cluster's key-value store (no error when there are none)."""
    from ray.experimental.internal_kv import _internal_kv_del

    _internal_kv_del(key_of(model))
