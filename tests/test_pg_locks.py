"""Registry locks as PostgreSQL advisory locks (orchestrator/tracking/pg_locks.py), on a real
PostgreSQL: one holder at a time however long a holder stalls, the lock freed when its holder dies,
and a holder whose session ended fenced off."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import psycopg
import pytest
from mlflow import MlflowClient

from orchestrator.tracking import locks, pg_locks
from orchestrator.tracking.version_refs import RegistryError
from reliability_records import record
from services import pointed_at


def test_lock_keys_are_signed_64_bit_and_differ_by_name():
    key = pg_locks.lock_key("fmnist.registration-lock")
    assert key == pg_locks.lock_key("fmnist.registration-lock")
    assert -(2**63) <= key < 2**63
    names = [f"model-{i}.registration-lock" for i in range(2000)] + ["fmnist.promotion-lock"]
    assert len({pg_locks.lock_key(name) for name in names}) == len(names)


def test_the_lock_database_is_named_or_is_the_tracking_store(monkeypatch):
    monkeypatch.delenv(pg_locks.LOCK_DSN_ENV, raising=False)
    assert pg_locks.lock_dsn("sqlite:///mlflow.db") is None
    assert pg_locks.lock_dsn("http://mlflow:5000") is None
    assert pg_locks.lock_dsn("postgresql+psycopg://u:p@db:5432/mlflow") == "postgresql://u:p@db:5432/mlflow"
    assert pg_locks.lock_dsn("postgresql://u@db/mlflow") == "postgresql://u@db/mlflow"
    monkeypatch.setenv(pg_locks.LOCK_DSN_ENV, "postgresql://locks:x@db/mlflow")
    assert pg_locks.lock_dsn("http://mlflow:5000") == "postgresql://locks:x@db/mlflow"


def test_contending_holders_never_overlap_even_when_each_stalls(mlflow_stack):
    """Eight threads take one lock, each stalling while it holds it (far past any lease): at most one
    is ever inside, and each gets in once the one before lets go."""
    inside, most, entered = [0], [0], []
    guard = threading.Lock()

    def hold(i: int) -> None:
        with locks.hold(pg_locks.AdvisoryLocks(mlflow_stack.postgres_dsn), "overlap.registration-lock", "overlap", 60):
            with guard:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            time.sleep(0.3)  # a stalled holder: nobody may take the lock meanwhile
            with guard:
                inside[0] -= 1
                entered.append(i)

    threads = [threading.Thread(target=hold, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    record(
        "security", check="advisory lock, 8 holders each stalling while held: never two at once", passed=most[0] == 1
    )
    assert most[0] == 1 and sorted(entered) == list(range(8))


def test_a_taker_waits_for_a_stalled_holder_and_gives_up_in_one_line(mlflow_stack):
    with locks.hold(pg_locks.AdvisoryLocks(mlflow_stack.postgres_dsn), "stalled.promotion-lock", "stalled", 5) as held:
        started = time.monotonic()
        with pytest.raises(RegistryError) as refused:
            with locks.hold(
                pg_locks.AdvisoryLocks(mlflow_stack.postgres_dsn), "stalled.promotion-lock", "m: another promotion", 1
            ):
                pass
        assert time.monotonic() - started >= 1
        assert str(refused.value).startswith("m: another promotion has held stalled.promotion-lock")
        held.check()  # still the holder


HOLDER = """
import sys, time
from orchestrator.tracking import locks, pg_locks
with locks.hold(pg_locks.AdvisoryLocks(sys.argv[1]), "killed.registration-lock", "killed", 30):
    print("held", flush=True)
    time.sleep(600)
"""


def test_a_killed_holder_frees_its_lock_at_once(mlflow_stack):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, mlflow_stack.postgres_dsn], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RegistryError):
            with locks.hold(pg_locks.AdvisoryLocks(mlflow_stack.postgres_dsn), "killed.registration-lock", "killed", 1):
                pass
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=30)
        started = time.monotonic()
        with locks.hold(
            pg_locks.AdvisoryLocks(mlflow_stack.postgres_dsn), "killed.registration-lock", "killed", 30
        ) as held:
            held.check()
        waited = time.monotonic() - started
    finally:
        holder.kill()
    record(
        "security",
        check=f"advisory lock: a SIGKILLed holder's lock taken by the next in {waited:.1f} s",
        passed=waited < 10,
    )
    assert waited < 10


def test_a_holder_whose_session_ended_fails_its_check_and_another_takes_the_lock(mlflow_stack):
    dsn = mlflow_stack.postgres_dsn
    with locks.hold(pg_locks.AdvisoryLocks(dsn), "ended.registration-lock", "ended", 5) as held:
        pid = held.connection.info.backend_pid
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(locks.LockLost, match="session ended"):
            held.check()
        with locks.hold(pg_locks.AdvisoryLocks(dsn), "ended.registration-lock", "ended", 5) as successor:
            successor.check()
    record("security", check="advisory lock: a holder whose session ended is fenced off (LockLost)", passed=True)


def test_registry_locks_use_the_database_when_one_is_named(mlflow_stack, tmp_path, monkeypatch):
    """With CONGRUENT_LOCK_DSN, `registry_lock` takes an advisory lock and writes no lock model."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv(pg_locks.LOCK_DSN_ENV, mlflow_stack.postgres_dsn)
    with locks.registry_lock("advised", "registration") as held:
        assert isinstance(held, pg_locks.AdvisoryLease)
        held.check()
        with pytest.raises(RegistryError, match="advised: another registration has held"):
            with locks.hold(
                pg_locks.AdvisoryLocks(mlflow_stack.postgres_dsn),
                locks.lock_name("advised", "registration"),
                "advised: another registration",
                0.5,
            ):
                pass
    assert MlflowClient(tracking_uri=uri, registry_uri=uri).search_registered_models() == []


OTHER_BACKEND = """
from orchestrator.tracking import locks
from orchestrator.tracking.version_refs import RegistryError
try:
    with locks.registry_lock("guarded", "promotion"):
        print("held")
except RegistryError as e:
    print(e)
"""


def test_a_process_that_would_lock_a_model_with_the_other_backend_is_refused(mlflow_stack, tmp_path, monkeypatch):
    """A model first registered under advisory locks records so; a second process whose settings
    would take an MLflow lease instead (no CONGRUENT_LOCK_DSN) is refused in one line naming both,
    and leaves no lease behind. The other way round, the same."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    with pointed_at(uri, monkeypatch):  # this process and the second one: one registry
        monkeypatch.setenv(pg_locks.LOCK_DSN_ENV, mlflow_stack.postgres_dsn)
        with locks.registry_lock("guarded", "registration") as held:
            locks.claim_backend(client, "guarded", held.backend)  # as a first registration does
        assert client.get_registered_model("guarded").tags[locks.LOCK_BACKEND_TAG] == "postgresql"
        env = {k: v for k, v in os.environ.items() if k != pg_locks.LOCK_DSN_ENV}
        done = subprocess.run(
            [sys.executable, "-c", OTHER_BACKEND], env=env, capture_output=True, text=True, timeout=120
        )
        line = done.stdout.strip()
        assert line.startswith("guarded: its registry locks are PostgreSQL advisory locks"), done.stdout + done.stderr
        assert "this process would take an MLflow registry lease" in line
        assert [m.name for m in client.search_registered_models()] == ["guarded"]  # its lease released
        with locks.registry_lock("guarded", "promotion") as held:  # the same settings as the first: taken
            held.check()
        client.set_registered_model_tag("guarded", locks.LOCK_BACKEND_TAG, "mlflow")  # now guarded by leases:
        with pytest.raises(RegistryError, match="its registry locks are MLflow registry leases .* PostgreSQL advisory"):
            with locks.registry_lock("guarded", "promotion"):  # this process's advisory lock is refused
                pass
    record("security", check="a process with the other lock backend than its model's is refused", passed=True)
