"""Registry locks as PostgreSQL advisory locks: the guarantee MLflow's API cannot give (locks.py), from
the store under the registry when that store is PostgreSQL (docker-compose.yml's).

A session-level advisory lock (`pg_try_advisory_lock(key)`) has at most one holder at a time, by the
database's own lock manager. The holder keeps it for as long as its session lives, however long it
stalls: nobody breaks it, so there is no stale-lock judgment and no window between a check and a
delete. The server ends the session, and frees the lock, when the holder's process dies (its socket
closes) or its machine stops answering (TCP keepalives, set per session below). A stalled holder
therefore makes the others wait (LOCK_WAIT_S, then one line) instead of being broken.

`check` (fencing) fails once the session is gone: then the server has freed the lock and another may
hold it. A lost connection is never re-taken silently.

Used when CONGRUENT_LOCK_DSN is set (a libpq connection string: postgresql://USER:PASSWORD@HOST/DB,
or `host=… dbname=… user=… password=…` as docker-compose.yml sets it; the role needs LOGIN only:
advisory locks take no privilege), or when MLFLOW_TRACKING_URI is itself a postgresql store.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from dataclasses import dataclass
from typing import Any

from orchestrator.tracking.version_refs import LockLost, RegistryError

LOCK_DSN_ENV = "CONGRUENT_LOCK_DSN"
KEEPALIVE: dict[str, Any] = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5, "keepalives_count": 3}
# the server side of the same: it drops a session whose client stopped answering after ~25 s
SERVER_KEEPALIVE = "SET tcp_keepalives_idle = 10; SET tcp_keepalives_interval = 5; SET tcp_keepalives_count = 3"
CONNECT_TIMEOUT_S = 10


def lock_key(name: str) -> int:
    """The advisory lock key of `name`: the first 8 bytes of its SHA-256, as a signed 64-bit integer."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


def lock_dsn(tracking_uri: str | None = None) -> str | None:
    """Where advisory locks are taken: CONGRUENT_LOCK_DSN, else the tracking URI when it is a
    postgresql store (without its SQLAlchemy driver suffix), else None (locks.py's MLflow leases)."""
    if dsn := os.environ.get(LOCK_DSN_ENV, "").strip():
        return dsn
    if tracking_uri is None:
        import mlflow

        tracking_uri = mlflow.get_tracking_uri()
    if re.match(r"postgres(ql)?(\+\w+)?://", tracking_uri):
        return re.sub(r"^postgres(ql)?(\+\w+)?://", "postgresql://", tracking_uri)
    return None


class AdvisoryLease:
    """A held advisory lock: its session is the lease."""

    backend = "postgresql"

    def __init__(self, connection: Any, lock: str, key: int) -> None:
        self.connection, self.lock, self.key = connection, lock, key

    def check(self) -> None:
        """Fencing: LockLost unless this lock's session is still alive (module docstring)."""
        import psycopg

        try:
            self.connection.execute("SELECT 1")
        except psycopg.Error:
            raise LockLost(
                f"{self.lock}: the lock's PostgreSQL session ended, so its lock is free; nothing changed"
            ) from None

    def release(self) -> None:
        import psycopg

        try:
            self.connection.execute("SELECT pg_advisory_unlock(%s)", (self.key,))
        except psycopg.Error:
            pass  # the session is gone, and the lock with it
        finally:
            self.connection.close()


def _connect(dsn: str, deadline: float) -> Any:
    import psycopg

    delay = 0.5
    while True:
        try:
            connection = psycopg.connect(dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S, **KEEPALIVE)
            connection.execute(SERVER_KEEPALIVE)
            return connection
        except psycopg.OperationalError as e:
            if time.monotonic() > deadline:
                raise RegistryError(f"cannot reach the lock database: {str(e).strip().splitlines()[0]}") from None
            time.sleep(delay)
            delay = min(2 * delay, 4.0)


@dataclass(frozen=True)
class AdvisoryLocks:
    """Locks as session-level advisory locks of the PostgreSQL database `dsn` names (a LockBackend
    of locks.py, whose `hold` waits for them)."""

    dsn: str
    name = AdvisoryLease.backend
    description = "a PostgreSQL advisory lock"

    def taker(self, lock: str, deadline: float) -> AdvisoryTaker:
        return AdvisoryTaker(self.dsn, lock, deadline)


class AdvisoryTaker:
    """One process's tries at an advisory lock, on one session (reconnected, until `deadline`, when
    the database restarts)."""

    def __init__(self, dsn: str, lock: str, deadline: float) -> None:
        self.dsn, self.lock, self.deadline, self.key = dsn, lock, deadline, lock_key(lock)
        self.connection = _connect(dsn, deadline)

    def attempt(self) -> AdvisoryLease | None:
        import psycopg

        try:
            taken = self.connection.execute("SELECT pg_try_advisory_lock(%s)", (self.key,)).fetchone()[0]
        except psycopg.Error:  # the connection broke (a database restart): reconnect until the deadline
            self.connection.close()
            self.connection = _connect(self.dsn, self.deadline)
            return None
        return AdvisoryLease(self.connection, self.lock, self.key) if taken else None

    def abandon(self) -> None:
        self.connection.close()
