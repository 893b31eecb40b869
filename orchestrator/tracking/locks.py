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

One interface: a `LockBackend` (an MLflow registry lease here, a PostgreSQL advisory lock in
pg_locks.py) makes one attempt at a time; `hold` is the one wait loop around both, and
`lock_backend` chooses between them, in one place, by the scheme of the lock URI
(CONGRUENT_LOCK_DSN, else the tracking URI: postgresql → advisory locks, else leases). A model
records the backend that guards it (the registered-model tag LOCK_BACKEND_TAG, written on its first
registration); a process that would lock it with the other one refuses, in one line naming both —
two processes with different settings would otherwise both hold "the" lock.
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
from dataclasses import dataclass
from typing import Any, Protocol

from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from orchestrator.tracking import pg_locks
from orchestrator.tracking.tags import LOCK_BACKEND_TAG, LOCK_HOLDER, LOCK_RENEWALS, LOCK_TAG, LOCK_TOKEN
from orchestrator.tracking.version_refs import LockLost, RegistryError
from workers.names import LOCK_SUFFIX

# a lock not renewed for this long (by the taker's clock) was left by a holder that stalled or died; its
# holder stops at half of it, so a registry that takes up to ~10 s a call (an MLflow server checking
# basic-auth passwords on 2 loaded cores took 1 to 9 s) still renews in time (tests/test_locks.py)
LEASE_S = 60.0
RENEW_S = 5.0  # how often the holder starts a renewal (however long the last one took)
LOCK_WAIT_S = 120.0  # how long a taker waits for another's lock (over a lease: it may break a dead holder's)
UNTAGGED_S = 1.0  # a lock's name seen without LOCK_TAG this long is a model, not a lock mid-create or mid-delete


def lock_name(model: str, purpose: str) -> str:
    return f"{model}.{purpose}-lock"


def is_lock_name(name: str) -> bool:
    """Whether `name` has the form of a lock's name (reserved: a model may not be named so)."""
    return re.search(LOCK_SUFFIX, name) is not None


class HeldLock(Protocol):
    backend: str  # the LockBackend.name of the lock

    def check(self) -> None:
        """Fencing: LockLost unless this holder still holds the lock."""

    def release(self) -> None:
        """Free the lock (if this holder still holds it)."""


class Taker(Protocol):
    """One process's tries at one lock."""

    def attempt(self) -> HeldLock | None:
        """One try: the held lock, or None while another holds it; RegistryError when it can never be taken."""

    def abandon(self) -> None:
        """Stop trying: free what the tries hold (a connection)."""


class LockBackend(Protocol):
    name: str  # what a model's LOCK_BACKEND_TAG records
    description: str  # a lock of it, in words: "an MLflow registry lease"

    def taker(self, lock: str, deadline: float) -> Taker:
        """This process's tries at `lock` (`deadline`: time.monotonic() after which it gives up)."""


def lock_backend(client: Any = None) -> LockBackend:
    """The backend of this process's locks, by the scheme of its lock URI: PostgreSQL advisory locks
    where pg_locks.lock_dsn names a database, else leases in the MLflow registry (`client`, given by
    tests, names a registry and so the leases)."""
    dsn = pg_locks.lock_dsn() if client is None else None
    if dsn is not None:
        return pg_locks.AdvisoryLocks(dsn)
    return RegistryLeases(client or MlflowClient())


@contextmanager
def hold(backend: LockBackend, lock: str, what: str, wait_s: float | None = None) -> Iterator[HeldLock]:
    """Hold `lock` of `backend` for the block, trying again with a doubling pause (at most 1 s);
    RegistryError after `wait_s` (default LOCK_WAIT_S) of another holder — `what`, e.g. "fmnist:
    another registration", begins that line."""
    wait_s = LOCK_WAIT_S if wait_s is None else wait_s
    deadline, delay = time.monotonic() + wait_s, 0.05
    taker = backend.taker(lock, deadline)
    while (held := taker.attempt()) is None:
        if time.monotonic() > deadline:
            taker.abandon()
            raise RegistryError(f"{what} has held {lock} ({backend.description}) for over {wait_s:g} s; try again")
        time.sleep(delay)
        delay = min(2 * delay, 1.0)
    try:
        yield held
    finally:
        held.release()


class Lease:
    """A held lock: renewed by a thread of its own until released; `check` before the protected step."""

    backend = "mlflow"

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
                self.client.set_registered_model_tag(self.lock, LOCK_RENEWALS, str(self.renewals))
            except MlflowException:
                continue  # the registry is unreachable: the lease runs down and `check` fails
            self.renewed_at = writing

    def _token_now(self) -> str | None:
        try:
            return self.client.get_registered_model(self.lock).tags.get(LOCK_TOKEN)
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
    """Hold `<model>.<purpose>-lock` for the block, with this process's backend (`lock_backend`);
    RegistryError after LOCK_WAIT_S of another holder, if a registered model that is not a lock has
    the name, or if `model` records that another backend guards it (`refuse_other_backend`)."""
    backend = lock_backend(client)
    with hold(backend, lock_name(model, purpose), f"{model}: another {purpose}") as held:
        refuse_other_backend(client or MlflowClient(), model, backend)
        yield held


def refuse_other_backend(client: Any, model: str, backend: LockBackend) -> None:
    """RegistryError, one line naming both, when `model` is registered with another lock backend
    than `backend` (LOCK_BACKEND_TAG); a model not registered yet records one when it is."""
    try:
        recorded = client.get_registered_model(model).tags.get(LOCK_BACKEND_TAG)
    except MlflowException:
        return  # not registered yet: its first registration records the backend (`claim_backend`)
    if recorded is not None and recorded != backend.name:
        raise _guarded_otherwise(
            model,
            recorded,
            f"would take {backend.description}; run it with the lock settings (CONGRUENT_LOCK_DSN, "
            f"MLFLOW_TRACKING_URI) of the processes that register {model}",
        )


def claim_backend(client: Any, model: str, backend: str) -> None:
    """Before `model`'s first registration: create it with LOCK_BACKEND_TAG = `backend` (one creator
    wins, the registry's names being unique), or tag a model registered before backends were recorded;
    RegistryError when another backend claimed it meanwhile."""
    try:
        client.create_registered_model(model, tags={LOCK_BACKEND_TAG: backend})
        return
    except MlflowException as e:
        if e.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
    recorded = client.get_registered_model(model).tags.get(LOCK_BACKEND_TAG)
    if recorded is None:
        client.set_registered_model_tag(model, LOCK_BACKEND_TAG, backend)
    elif recorded != backend:
        raise _guarded_otherwise(model, recorded, f"took {BACKEND_WORDS[backend][0]}; nothing was registered")


def _guarded_otherwise(model: str, recorded: str, what_this_process_does: str) -> RegistryError:
    """The one line of a model whose recorded lock backend is not this process's."""
    theirs = BACKEND_WORDS.get(recorded, (recorded, recorded))[1]
    return RegistryError(
        f"{model}: its registry locks are {theirs} ({LOCK_BACKEND_TAG}={recorded}), but this process "
        + what_this_process_does
    )


@dataclass(frozen=True)
class RegistryLeases:
    """Locks as leases in the MLflow registry itself (module docstring)."""

    client: Any
    name = "mlflow"
    description = "an MLflow registry lease"

    def taker(self, lock: str, deadline: float) -> LeaseTaker:
        return LeaseTaker(self.client, lock)


# each backend's lock in words, one and many
BACKEND_WORDS = {
    RegistryLeases.name: (RegistryLeases.description, "MLflow registry leases"),
    pg_locks.AdvisoryLocks.name: (pg_locks.AdvisoryLocks.description, "PostgreSQL advisory locks"),
}


class LeaseTaker:
    """One process's tries at a lease: create the lock's registered model, or watch its holder's
    renewals and break it once they stopped for LEASE_S (module docstring)."""

    def __init__(self, client: Any, lock: str) -> None:
        self.client, self.lock, self.token = client, lock, uuid.uuid4().hex
        purpose = lock.rsplit(".", 1)[-1].removesuffix("-lock")
        holder = f"{socket.gethostname()}:{os.getpid()}"
        self.tags = {LOCK_TOKEN: self.token, LOCK_HOLDER: holder, LOCK_TAG: purpose, LOCK_RENEWALS: "0"}
        self.seen: tuple[tuple[str, str], float] | None = None  # the lock's (token, renewals), and since when
        self.untagged_since: float | None = None  # since when every read found the name without LOCK_TAG

    def attempt(self) -> Lease | None:
        client, lock = self.client, self.lock
        try:
            client.create_registered_model(lock, tags=self.tags)
            return Lease(client, lock, self.token)
        except MlflowException as e:
            if e.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
        state = _state(client, lock)
        if state is not None and state[0] == self.token:  # a retried POST whose first try had created it
            return Lease(client, lock, self.token)
        if state != ("", ""):
            self.untagged_since = None
        if state is None:
            self.seen = None  # released meanwhile: take it on the next try
        elif state == ("", ""):
            # a read that overlaps a lock's release or creation can find the name without its tags
            # (on the sqlite store, 1 read in 4 during a create/delete churn): untagged only if it stays so
            self.untagged_since = self.untagged_since or time.monotonic()
            if time.monotonic() - self.untagged_since >= UNTAGGED_S:
                model, purpose = lock.rsplit(".", 1)
                raise RegistryError(
                    f"{lock} is a registered model, not a lock of this Congruent (an earlier release's lock, or a "
                    f"model of that name): delete or rename it to run {purpose.removesuffix('-lock')}s of {model}"
                )
        elif self.seen is None or self.seen[0] != state:
            self.seen = (state, time.monotonic())
        elif time.monotonic() - self.seen[1] > LEASE_S:  # not renewed for a lease: its holder stalled or died
            if _state(client, lock) == state:
                _delete(client, lock)
            self.seen = None
        return None

    def abandon(self) -> None:
        pass  # a lease taker holds nothing between tries


def _state(client: Any, lock: str) -> tuple[str, str] | None:
    """(token, renewals) of the lock; ("", "") for a registered model that is not a lock; None if absent."""
    try:
        tags = client.get_registered_model(lock).tags
    except MlflowException:
        return None
    if LOCK_TAG not in tags:
        return ("", "")
    return (tags.get(LOCK_TOKEN, ""), tags.get(LOCK_RENEWALS, ""))


def _delete(client: Any, lock: str) -> None:
    try:
        client.delete_registered_model(lock)
    except MlflowException:
        pass  # another taker broke it first
