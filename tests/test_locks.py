"""The registry locks (orchestrator/tracking/locks.py): a holder that stalls past its lease loses
the lock and is fenced off, a lock is deleted only by its holder (or a breaker who saw it stale),
and a registered model that merely has a lock's name is never taken for one nor deleted."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import RESOURCE_ALREADY_EXISTS, RESOURCE_DOES_NOT_EXIST

from orchestrator.tracking import locks, store
from orchestrator.tracking.version_refs import RegistryError
from reliability_records import record


class FakeRegistry:
    """Registered models and their tags, as one MLflow server holds them (create fails on a taken name)."""

    def __init__(self) -> None:
        self.models: dict[str, dict[str, str]] = {}
        self.guard = threading.Lock()


class View:
    """One process's client of a FakeRegistry; `stall()` blocks each of its calls until `resume()`,
    as a paused process or a hung connection would (a call already inside the registry completes)."""

    def __init__(self, registry: FakeRegistry) -> None:
        self.registry, self.running = registry, threading.Event()
        self.running.set()

    def stall(self) -> None:
        self.running.clear()

    def resume(self) -> None:
        self.running.set()

    def _enter(self) -> None:
        assert self.running.wait(timeout=30)

    def create_registered_model(self, name: str, tags: dict[str, str]) -> None:
        self._enter()
        with self.registry.guard:
            if name in self.registry.models:
                raise MlflowException(f"{name} exists", error_code=RESOURCE_ALREADY_EXISTS)
            self.registry.models[name] = dict(tags)

    def get_registered_model(self, name: str) -> SimpleNamespace:
        self._enter()
        with self.registry.guard:
            if name not in self.registry.models:
                raise MlflowException(f"{name} not found", error_code=RESOURCE_DOES_NOT_EXIST)
            return SimpleNamespace(tags=dict(self.registry.models[name]))

    def set_registered_model_tag(self, name: str, key: str, value: str) -> None:
        self._enter()
        with self.registry.guard:
            if name not in self.registry.models:
                raise MlflowException(f"{name} not found", error_code=RESOURCE_DOES_NOT_EXIST)
            self.registry.models[name][key] = value

    def delete_registered_model(self, name: str) -> None:
        self._enter()
        with self.registry.guard:
            if self.registry.models.pop(name, None) is None:
                raise MlflowException(f"{name} not found", error_code=RESOURCE_DOES_NOT_EXIST)


class SlowView(View):
    """A client of a registry that takes `delay` seconds to answer each call."""

    def __init__(self, registry: FakeRegistry, delay: float) -> None:
        super().__init__(registry)
        self.delay = delay

    def _enter(self) -> None:
        super()._enter()
        time.sleep(self.delay)


class ReadsDuringRelease(View):
    """A client whose first read of a lock overlaps its holder's release: it finds the name without
    its tags, as the sqlite store returns a model whose delete commits between its reads."""

    def __init__(self, registry: FakeRegistry) -> None:
        super().__init__(registry)
        self.torn = False

    def get_registered_model(self, name: str) -> SimpleNamespace:
        if self.torn:
            return super().get_registered_model(name)
        self.torn = True
        with self.registry.guard:
            self.registry.models.pop(name)
        return SimpleNamespace(tags={})


@pytest.fixture
def short_leases(monkeypatch):
    monkeypatch.setattr(locks, "LEASE_S", 0.6)
    monkeypatch.setattr(locks, "RENEW_S", 0.05)
    monkeypatch.setattr(locks, "LOCK_WAIT_S", 10.0)


def test_a_holder_that_stalls_past_its_lease_is_fenced_off_and_never_deletes_its_successors_lock(short_leases):
    registry = FakeRegistry()
    first, second = View(registry), View(registry)
    lock = locks.lock_name("m", "promotion")
    holding: list[str] = []  # who is inside the protected step, checked by `check`

    def protected_step(lease: locks.Lease, who: str) -> None:
        lease.check()
        holding.append(who)
        assert len(holding) == 1, holding  # never two holders at once
        time.sleep(0.05)
        holding.remove(who)

    with locks.registry_lock("m", "promotion", client=first) as stalled:
        protected_step(stalled, "first")  # it holds: it may act
        first.stall()  # paused before its next step, past the lease
        taken = threading.Event()

        def take() -> None:
            with locks.registry_lock("m", "promotion", client=second) as lease:
                protected_step(lease, "second")
                taken.set()
                assert first.running.wait(timeout=30)  # hold on while the first comes back
                time.sleep(0.2)
                protected_step(lease, "second")  # the first's return did not take it away

        successor = threading.Thread(target=take)
        started = time.monotonic()
        successor.start()
        assert taken.wait(timeout=10)
        assert time.monotonic() - started >= locks.LEASE_S  # broken only after a lease without renewal
        first.resume()
        with pytest.raises(locks.LockLost):
            protected_step(stalled, "first")
        assert registry.models[lock]["token"] != stalled.token  # the successor's lock, still there
    assert registry.models[lock]["token"] != stalled.token  # the first's release left it alone
    successor.join(timeout=10)
    assert lock not in registry.models  # the successor released it
    record("security", check="a lock holder stalled past its lease: fenced off, never two holders", passed=True)


def test_a_lease_the_holder_could_not_renew_fails_its_check_before_anyone_may_break_it(short_leases):
    """Even with no successor yet, a holder that could not reach the registry for LEASE_S / 2
    stops: a breaker needs LEASE_S of silence, so the two never overlap."""
    registry = FakeRegistry()
    view = View(registry)
    with locks.registry_lock("m", "registration", client=view) as lease:
        lease.check()
        view.stall()
        time.sleep(locks.LEASE_S / 2 + 0.1)
        view.resume()
        with pytest.raises(locks.LockLost, match="lease lapsed"):
            lease.check()


def test_a_live_holder_keeps_its_lock_past_the_lease(short_leases):
    registry = FakeRegistry()
    holder, taker = View(registry), View(registry)
    with locks.registry_lock("m", "promotion", client=holder) as lease:
        locks.LOCK_WAIT_S = 3 * locks.LEASE_S
        with pytest.raises(RegistryError, match="another promotion has held"):
            with locks.registry_lock("m", "promotion", client=taker):
                pass
        lease.check()  # renewed all along: still the holder


def test_a_lock_read_without_its_tags_while_released_is_taken_not_refused_as_a_model(short_leases):
    """CI failed so (a registration refused: "is a registered model, not a lock"): one untagged read
    of a lock that is being released must not be taken for a registered model of that name."""
    registry = FakeRegistry()
    registry.models[locks.lock_name("m", "registration")] = {"token": "other", locks.LOCK_TAG: "registration"}
    with locks.registry_lock("m", "registration", client=ReadsDuringRelease(registry)) as lease:
        lease.check()
    assert registry.models == {}


SLOW_CALL_S = 4.0  # what the lease must tolerate per registry call (CI saw 1 to 9 s: basic auth, 2 loaded cores)


def test_a_holder_whose_registry_answers_slowly_keeps_its_lease(monkeypatch):
    """Each registry call takes SLOW_CALL_S (time scaled by 1/10, the module's ratios kept): the
    holder renews in time and every check passes for two leases (before: renewals RENEW_S after the
    last one ended, dated from their read, and a 30 s lease fenced off a live holder in CI)."""
    scale = 0.1
    monkeypatch.setattr(locks, "LEASE_S", locks.LEASE_S * scale)
    monkeypatch.setattr(locks, "RENEW_S", locks.RENEW_S * scale)
    client = SlowView(FakeRegistry(), SLOW_CALL_S * scale)
    with locks.registry_lock("m", "registration", client=client) as lease:
        until = time.monotonic() + 2 * locks.LEASE_S
        while time.monotonic() < until:
            lease.check()


def test_on_mlflow_a_release_deletes_only_its_own_lock(tmp_path, monkeypatch):
    """The first holder's lock was broken and taken meanwhile (as by a taker that saw it stale):
    leaving its block must not delete the successor's lock (before: deleted by name)."""
    store.configure()
    client, model = MlflowClient(), f"locked-{tmp_path.name}"
    lock = locks.lock_name(model, "promotion")
    with locks.registry_lock(model, "promotion"):
        client.delete_registered_model(lock)
        client.create_registered_model(lock, tags={"token": "successor", locks.LOCK_TAG: "promotion"})
    assert client.get_registered_model(lock).tags["token"] == "successor"
    client.delete_registered_model(lock)
    record("security", check="a lock released only by its holder (MLflow)", passed=True)


def test_on_mlflow_a_model_named_like_a_lock_is_refused_not_deleted(tmp_path, monkeypatch):
    """A registered model `<model>.promotion-lock` that is not a lock (no LOCK_TAG): a taker says
    so in one line and never breaks it, however old (before: deleted with its versions as stale)."""
    store.configure()
    client, model = MlflowClient(), f"named-{tmp_path.name}"
    lock = locks.lock_name(model, "promotion")
    client.create_registered_model(lock, tags={"token": "t", "holder": "h"})
    monkeypatch.setattr(locks, "LEASE_S", 0.0)
    monkeypatch.setattr(locks, "LOCK_WAIT_S", 2.0)
    with pytest.raises(RegistryError, match="is a registered model, not a lock"):
        with locks.registry_lock(model, "promotion"):
            pass
    assert client.get_registered_model(lock).tags == {"token": "t", "holder": "h"}
    client.delete_registered_model(lock)
    record("security", check="a model named like a lock refused, not deleted (MLflow)", passed=True)
