"""The MLflow store: embedded by default, a server when `MLFLOW_TRACKING_URI` says so.

With no configuration the store is `sqlite:///<cwd>/mlflow.db` with artifacts under `<cwd>/mlruns`;
`MLFLOW_TRACKING_URI` points the same code at a server (HTTP calls retried for about a minute).
MLflow itself is imported where a function talks to the store: where the store is, and whether an
embedded one exists yet, are answered without it (`congruent check` stays fast).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path

from workers.errors import first_line

# MLflow's HTTP client retries connection errors and 429/5xx answers with backoff
# factor·2^(n−1) s: 0, 2, 4, 8, 16, 32 s here, so a server restart of up to a minute is survived
# and an unreachable server fails after about 62 s (plus the timeouts), not after MLflow's default
# of about four minutes. Values already in the environment win.
HTTP_RETRY_POLICY = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "6",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_JITTER": "0.5",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "30",
}


class TrackingUnavailable(RuntimeError):
    """The tracking store cannot be reached; the message is one line."""


def bounded_http_retries() -> None:
    for key, value in HTTP_RETRY_POLICY.items():
        os.environ.setdefault(key, value)


def tracking_uri() -> str:
    """`MLFLOW_TRACKING_URI`, else the embedded sqlite store in the working directory."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path.cwd() / 'mlflow.db'}"


def embedded_database() -> Path | None:
    """The sqlite file of an embedded store (None for a server), which may not exist yet."""
    uri = tracking_uri()
    return Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None


def configure() -> str:
    """Point MLflow at `MLFLOW_TRACKING_URI`, else at the embedded sqlite store in the working
    directory (created here, in the driver, before anything else touches it), with the bounded
    retry policy above."""
    bounded_http_retries()
    # MLflow draws a tqdm bar on stderr per artifact download once tqdm is installed (tokenizers'
    # huggingface_hub brings it): the commands print their own lines only
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)  # "Creating initial MLflow database tables"
    import mlflow

    uri = tracking_uri()
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    with schema_lock(uri):
        client = mlflow.MlflowClient()
        client.search_experiments(max_results=1)  # the tracking store creates the sqlite schema once
        client.search_registered_models(max_results=1)  # and the registry store checks it
    return uri


@contextlib.contextmanager
def schema_lock(uri: str) -> Iterator[None]:
    """For a sqlite store: an exclusive lock on `<database>.lock` beside it, across processes.

    MLflow creates (and migrates) a sqlite store's tables when a process first opens it, without
    a lock: two drivers starting together on a new store both create them, and one fails (`table
    experiments already exists`, an alembic revision mismatch). The first to hold the lock
    creates the schema, the others then find it. Other stores lock themselves."""
    if not uri.startswith("sqlite:///"):
        yield
        return
    database = Path(uri.removeprefix("sqlite:///"))
    database.parent.mkdir(parents=True, exist_ok=True)
    with open(database.with_name(database.name + ".lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def check_store() -> str:
    """`configure()`, raising TrackingUnavailable (one line) when the store does not answer."""
    from mlflow.exceptions import MlflowException

    try:
        return configure()
    except MlflowException as e:
        uri = os.environ.get("MLFLOW_TRACKING_URI", "")
        retries = os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"]
        text = str(e).strip()
        errno = re.search(r"\[Errno -?\d+\] [^'\")]+", text)  # "[Errno 111] Connection refused"
        reason = errno.group(0) if errno else first_line(e)  # whole, never cut
        raise TrackingUnavailable(
            f"MLflow tracking store {uri} did not answer after {retries} retries ({reason})"
        ) from None


def experiment_id(name: str) -> str:
    """The experiment `name`, created if missing; with the embedded sqlite store its artifacts go
    to `mlruns/` beside the database file."""
    import mlflow
    from mlflow.exceptions import MlflowException

    client = mlflow.MlflowClient()
    existing = client.get_experiment_by_name(name)
    if existing is not None:
        return existing.experiment_id
    uri = mlflow.get_tracking_uri()
    location = None
    if uri.startswith("sqlite:///"):
        location = (Path(uri.removeprefix("sqlite:///")).parent / "mlruns").resolve().as_uri()
    try:
        return client.create_experiment(name, artifact_location=location)
    except MlflowException as e:  # another driver created it meanwhile
        created = client.get_experiment_by_name(name)
        if created is None or e.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
        return created.experiment_id
