"""A lock per registered model and purpose, held in the MLflow registry itself, for the steps that
must not interleave when pipelines run at once: moving `champion` (promotion.py) and registering a
spec's version exactly once (registry.register_once).

MLflow has no conditional update, but every registry store enforces unique registered-model names
(a primary key in the SQL stores, and behind an MLflow server), so of several concurrent
`create_registered_model("<model>.<purpose>-lock")` calls exactly one succeeds. The holder deletes
it on release; it shows in the registry only while held (well under a second for a promotion, a
registration's one POST for a registration). A lock whose holder died is broken by the next taker
once older than LOCK_TTL_S (by the server's creation time against this machine's clock: clocks
more than LOCK_TTL_S apart would break a live lock).
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from orchestrator.tracking.version_refs import RegistryError

LOCK_TTL_S = 120.0  # a lock older than this was left by a holder that died
LOCK_WAIT_S = 60.0  # how long a taker waits for another's lock


def lock_name(model: str, purpose: str) -> str:
    return f"{model}.{purpose}-lock"


@contextmanager
def registry_lock(model: str, purpose: str) -> Iterator[None]:
    """Hold `<model>.<purpose>-lock` (module docstring) for the block; RegistryError after
    LOCK_WAIT_S of another holder."""
    client, lock, token = MlflowClient(), lock_name(model, purpose), uuid.uuid4().hex
    holder = f"{socket.gethostname()}:{os.getpid()}"
    deadline, delay = time.monotonic() + LOCK_WAIT_S, 0.05
    while True:
        try:
            client.create_registered_model(lock, tags={"token": token, "holder": holder})
            break
        except MlflowException as e:
            if e.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
        if _holds(client, lock, token):  # a retried POST whose first try had created it
            break
        if time.monotonic() > deadline:
            raise RegistryError(f"{model}: another {purpose} has held {lock} for over {LOCK_WAIT_S:g} s; try again")
        time.sleep(delay)
        delay = min(2 * delay, 1.0)
    try:
        yield
    finally:
        client.delete_registered_model(lock)


def _holds(client: MlflowClient, lock: str, token: str) -> bool:
    """Whether `token` holds `lock`; a lock left by a holder that died (older than LOCK_TTL_S) is
    deleted, so that the next try can take it."""
    try:
        found = client.get_registered_model(lock)
    except MlflowException:
        return False  # released meanwhile
    if found.tags.get("token") == token:
        return True
    if time.time() - found.creation_timestamp / 1000 > LOCK_TTL_S:
        try:
            client.delete_registered_model(lock)
        except MlflowException:
            pass  # another taker broke it first
    return False
