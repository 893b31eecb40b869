"""A lock per registered model and purpose, held in the MLflow registry itself, for the steps that
must not interleave when pipelines run at once: moving `champion` (promotion.py) and registering a
spec's version exactly once (registry.register_once).

Taking it: every registry store enforces unique registered-model names (a primary key in the SQL
stores, and behind an MLflow server), so of several concurrent `create_registered_model(
"<model>.<purpose>-lock")` calls exactly one succeeds. The lock carries the holder's random token
and LOCK_TAG; a registered model without that tag is never treated as a lock (nor deleted), and
specs refuse model names of the lock form (`is_lock_name`). A store may answer a read that overlaps
a lock's release with the model but not its tags, so a name is taken for a model only when every
read finds it untagged for UNTAGGED_S.

A lease, not a TTL: while it holds the lock the holder renews it every RENEW_S (a counter tag it
bumps). A taker breaks a lock only when its (token, renewals) stayed the same for LEASE_S of the
taker's own monotonic clock: no two machines' clocks are ever compared. Before the step the lock
protects, the holder calls `Lease.check` (fencing): it fails unless the registry still shows its
token and the write of its last renewal started within LEASE_S / 2 (the registry took it later, so a
breaker's LEASE_S of silence began after), so a holder that stalled (a paused process, an MLflow call
that hung) stops before anyone could have broken its lock. Release and break
delete only a lock whose token is the one read just before.

What MLflow cannot give: it has no conditional write or delete, so "compare, then delete" and
"check, then act" each leave a window of one registry call between the read and the write. The
lease keeps a stalled holder out of it (a breaker needs LEASE_S of silence, the holder stops after
LEASE_S / 2); two holders at once would need the protected call itself to hang in flight for over
LEASE_S / 2 after a check that passed (tests/test_locks.py). So where the registry's store is
PostgreSQL and the driver may reach it (CONGRUENT_LOCK_DSN, or a postgresql tracking URI), the lock
is a PostgreSQL advisory lock instead, which the database guarantees (pg_locks.py).
"""

from __future__ import annotations

import os
import re
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from orchestrator.tracking import pg_locks
from orchestrator.tracking.version_refs import LockLost, RegistryError
from workers.names import LOCK_SUFFIX

# a lock not renewed for this long (by the taker's clock) was left by a holder that stalled or died; its
# holder stops at half of it, so a registry that takes up to ~10 s a call (an MLflow server checking
# basic-auth passwords on 2 loaded cores took 1 to 9 s) still renews in time (tests/test_locks.py)
LEASE_S = 60.0
RENEW_S = 5.0  # how often the holder starts a renewal (however long the last one took)
LOCK_WAIT_S = 120.0  # how long a taker waits for another's lock (over a lease: it may break a dead holder's)
LOCK_TAG = "congruent.lock"  # on every lock; its value is the purpose
UNTAGGED_S = 1.0  # a lock's name seen without LOCK_TAG this long is a model, not a lock mid-create or mid-delete


def lock_name(model: str, purpose: str) -> str:
    return f"{model}.{purpose}-lock"


def is_lock_name(name: str) -> bool:
    """Whether `name` has the form of a lock's name (reserved: a model may not be named so)."""
    return re.search(LOCK_SUFFIX, name) is not None


class HeldLock(Protocol):
    def check(self) -> None:
        """Fencing: LockLost unless this holder still holds the lock."""


class Lease:
    """A held lock: renewed by a thread of its own until released; `check` before the protected step."""

    def __init__(self, client: Any, lock: str, token: str) -> None:
        self.client, self.lock, self.token = client, lock, token
        self.renewed_at = time.monotonic()  # when the write of the last renewal that went through started
        self.renewals, self.lost = 0, threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew_until_stopped, daemon=True, name=f"lease {lock}")
        self._thread.start()

    def _renew_until_stopped(self) -> None:
        started = time.monotonic()
        while not self._stop.wait(max(0.0, started + RENEW_S - time.monotonic())):
            started = time.monotonic()
            try:
                if self._token_now() != self.token:
                    self.lost.set()
                    return
                self.renewals += 1
                writing = time.monotonic()  # the registry takes the new count after this: a breaker saw it change
                self.client.set_registered_model_tag(self.lock, "renewals", str(self.renewals))
            except MlflowException:
                continue  # the registry is unreachable: the lease runs down and `check` fails
            self.renewed_at = writing

    def _token_now(self) -> str | None:
        try:
            return self.client.get_registered_model(self.lock).tags.get("token")
        except MlflowException:
            return None

    def check(self) -> None:
        """Fencing: LockLost unless this lease was renewed within LEASE_S / 2 and the registry
        still shows its token (module docstring)."""
        if self.lost.is_set() or time.monotonic() - self.renewed_at > LEASE_S / 2:
            raise LockLost(f"{self.lock}: the lease lapsed (the registry was not reached); nothing changed")
        if self._token_now() != self.token:
            self.lost.set()
            raise LockLost(f"{self.lock}: another holder took the lock after this one stalled; nothing changed")

    def release(self) -> None:
        """Stop renewing; delete the lock only if it still carries this token."""
        self._stop.set()
        self._thread.join()
        if self._token_now() == self.token:
            _delete(self.client, self.lock)


@contextmanager
def registry_lock(model: str, purpose: str, client: Any = None) -> Iterator[HeldLock]:
    """Hold `<model>.<purpose>-lock` for the block: a PostgreSQL advisory lock where pg_locks.lock_dsn
    names a database, else a lease in the registry (module docstring); RegistryError after
    LOCK_WAIT_S of another holder, or if a registered model that is not a lock has the name."""
    dsn = pg_locks.lock_dsn() if client is None else None
    if dsn is not None:
        with pg_locks.advisory_lock(dsn, lock_name(model, purpose), f"{model}: another {purpose}", LOCK_WAIT_S) as held:
            yield held
        return
    with _registry_lease(model, purpose, client or MlflowClient()) as lease:
        yield lease


@contextmanager
def _registry_lease(model: str, purpose: str, client: Any) -> Iterator[Lease]:
    lock, token = lock_name(model, purpose), uuid.uuid4().hex
    tags = {"token": token, "holder": f"{socket.gethostname()}:{os.getpid()}", LOCK_TAG: purpose, "renewals": "0"}
    deadline, delay = time.monotonic() + LOCK_WAIT_S, 0.05
    seen: tuple[tuple[str, str], float] | None = None  # the lock's (token, renewals), and since when
    untagged_since: float | None = None  # since when every read found the name without LOCK_TAG
    while True:
        try:
            client.create_registered_model(lock, tags=tags)
            break
        except MlflowException as e:
            if e.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
        state = _state(client, lock)
        if state is not None and state[0] == token:  # a retried POST whose first try had created it
            break
        if state != ("", ""):
            untagged_since = None
        if state is None:
            seen = None  # released meanwhile: take it on the next try
        elif state == ("", ""):
            # a read that overlaps a lock's release or creation can find the name without its tags
            # (on the sqlite store, 1 read in 4 during a create/delete churn): untagged only if it stays so
            untagged_since = time.monotonic() if untagged_since is None else untagged_since
            if time.monotonic() - untagged_since < UNTAGGED_S:
                time.sleep(delay)
                continue
            raise RegistryError(
                f"{lock} is a registered model, not a lock of this Congruent (an earlier release's lock, or a "
                f"model of that name): delete or rename it to run {purpose}s of {model}"
            )
        elif seen is None or seen[0] != state:
            seen = (state, time.monotonic())
        elif time.monotonic() - seen[1] > LEASE_S:  # not renewed for a lease: its holder stalled or died
            if _state(client, lock) == state:
                _delete(client, lock)
            seen = None
        if time.monotonic() > deadline:
            raise RegistryError(f"{model}: another {purpose} has held {lock} for over {LOCK_WAIT_S:g} s; try again")
        time.sleep(delay)
        delay = min(2 * delay, 1.0)
    lease = Lease(client, lock, token)
    try:
        yield lease
    finally:
        lease.release()


def _state(client: Any, lock: str) -> tuple[str, str] | None:
    """(token, renewals) of the lock; ("", "") for a registered model that is not a lock; None if absent."""
    try:
        tags = client.get_registered_model(lock).tags
    except MlflowException:
        return None
    if LOCK_TAG not in tags:
        return ("", "")
    return (tags.get("token", ""), tags.get("renewals", ""))


def _delete(client: Any, lock: str) -> None:
    try:
        client.delete_registered_model(lock)
    except MlflowException:
        pass  # another taker broke it first
