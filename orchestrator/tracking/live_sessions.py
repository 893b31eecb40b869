"""Which serving sessions are a version's live evidence: the registry, not the runs' own tags.

A session's run is an ordinary MLflow run found by its tags, which anyone who may write the model's
experiment could copy onto a run of their own (more pairs, fewer flips). So `start_live_run` records
each session it opens on the candidate's registered version — tag SESSIONS_TAG + champion, the run
ids comma-joined, written under the model's registry lock (locks.py: two sessions opened at once
both stay recorded) — and `promote --live` reads only the sessions its candidate's version records
beside the champion (`bound_sessions`), as a restarted `serve` continues only one of those. A model
that is not registered (a test's ledger) records none.
"""

from __future__ import annotations

from orchestrator.tracking.tags import SESSIONS_TAG


def bind_session(model: str, candidate: str, champion: str, run_id: str) -> bool:
    """Record `run_id` on `model`'s version `candidate` as a session beside `champion`; False when
    that version is not registered."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    from orchestrator.tracking.locks import registry_lock

    client, key = MlflowClient(), f"{SESSIONS_TAG}{champion}"
    try:
        client.get_model_version(model, candidate)
    except MlflowException as e:
        if e.error_code == "RESOURCE_DOES_NOT_EXIST":
            return False
        raise
    with registry_lock(model, "sessions") as lease:
        held = client.get_model_version(model, candidate).tags.get(key, "")
        ids = [i for i in held.split(",") if i]
        if run_id not in ids:
            lease.check()
            client.set_model_version_tag(model, candidate, key, ",".join([*ids, run_id]))
    return True


def bound_sessions(model: str, candidate: str, champion: str) -> set[str] | None:
    """The serving sessions `model`'s version `candidate` records beside `champion` (their run ids);
    None when that version is not registered."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    try:
        version = MlflowClient().get_model_version(model, candidate)
    except MlflowException as e:
        if e.error_code == "RESOURCE_DOES_NOT_EXIST":
            return None
        raise
    return {i for i in version.tags.get(f"{SESSIONS_TAG}{champion}", "").split(",") if i}
