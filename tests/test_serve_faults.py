"""`congruent serve` under faults, on the two-node cluster with an MLflow server: clients keep
sending while (1) the MLflow server is down for 15 s: serving goes on, and the pairs of that time are
kept and written once it is back; (2) a replica is killed (the candidate's, the ledger's, the
champion's, in turn): what each costs in failed requests and lost pairs is counted and recorded for
docs/reliability.md (benchmarks/code/reliability.py)."""

from __future__ import annotations

import base64
import signal
import threading
import time
import uuid
from contextlib import contextmanager

import pytest

from conftest import SPEC_RESOURCES, SPEC_TRAIN, run_update
from orchestrator.driver.serve import post, serve_model, stop_serving
from orchestrator.serving.handles import version_app_name
from orchestrator.serving.settings import Resources, ServeSettings
from orchestrator.tracking import live, promotion, store
from processes import free_port
from reliability_records import record
from servers import start_mlflow_server
from test_serving import png

DOWN_S = 15  # past the client's first retries (its MLflow calls retry for about a minute)
WHICH = {"version": "champion's only replica", "candidate": "shadow's replica", "LiveLedger": "ledger's replica"}
WHAT = {  # what the fault costs by design; the counts of the run follow in the record
    "version": "Serve starts another replica; meanwhile requests wait for it",
    "candidate": "Serve starts another replica; a shadow it does not answer loses its pairs",
    "LiveLedger": "Serve starts another replica; the gateway resends what it refused; its unwritten rows are lost",
}


class Traffic:
    """Clients sending one image a request, each with a fresh id, until stopped: the answered ids and
    the failures, each with when it happened."""

    def __init__(self, url: str, image: bytes, clients: int = 2) -> None:
        self.url, self.body = url, base64.b64encode(image).decode()
        self.prefix = uuid.uuid4().hex[:8]  # ids of their own: a restarted serve continues its session's ids
        self.answered: list[tuple[float, str]] = []
        self.failed: list[tuple[float, str]] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._send, args=(c,)) for c in range(clients)]

    def _send(self, client: int) -> None:
        n = 0
        while not self.stop.is_set():
            sample_id = f"{self.prefix}-c{client}-{n}"
            n += 1
            try:
                post(f"{self.url}/predict", {"inputs": [self.body], "ids": [sample_id]}, timeout=60)
                self.answered.append((time.monotonic(), sample_id))
            except (OSError, ValueError) as e:  # HTTP errors, resets, time-outs: what the test counts
                self.failed.append((time.monotonic(), repr(e)[:120]))
            time.sleep(0.02)

    def wait_for(self, answers: int, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while len(self.answered) < answers and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(self.answered) >= answers, (len(self.answered), self.failed[-3:])

    @contextmanager
    def running(self):
        for thread in self.threads:
            thread.start()
        try:
            yield self
        finally:
            self.stop.set()
            for thread in self.threads:
                thread.join(timeout=120)


@pytest.fixture(scope="module")
def served_versions(ray_cluster, tmp_path_factory, fashion_mnist):
    """v1 (champion) and v2 of a model tracked on an MLflow server of this module's tests:
    {model, server (a test that restarts it puts the new one here), image (one to send)}."""
    folder = tmp_path_factory.mktemp("serve-faults")
    server_args = (folder / "server", f"sqlite:///{folder / 'backend.db'}", str(folder / "art"), {})
    server = start_mlflow_server(*server_args)
    server.start_args = server_args  # (a restart is the same start on the same port)
    model = f"faults-{folder.name}"[-60:]
    data = {"train_limit": 500, "eval_limit": 200}
    common = {"model": model, "method": {"name": "none"}, "data": data, "train": SPEC_TRAIN}
    common |= {"resources": SPEC_RESOURCES, "storage": str(folder / "storage")}
    state = {"model": model, "server": server}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", server.uri)
        try:
            store.configure()
            run_update({**common, "version": "v1", "arch": "mlp-small"}, folder / "v1")
            run_update({**common, "version": "v2", "arch": "mlp"}, folder / "v2")
            promotion.set_champion(model, "1")
            state["image"] = png(fashion_mnist.eval.images[5000][0].numpy())
            yield state
        finally:
            state["server"].stop()


@pytest.fixture(scope="module")
def served(served_versions):
    """v1 served as champion and v2 shadowed, one serving session for this module's tests (each fault
    counts from the session's state at its start; a test that restarts the MLflow server leaves it up).
    Starting Serve and the four replicas again for each test proved nothing more."""
    from ray import serve

    settings = ServeSettings(chunk_rows=20, flush_s=1.0)
    try:
        served = serve_model(served_versions["model"], "2", settings, port=free_port(), resources=Resources(cpus=0.5))
        try:
            yield served
        finally:
            stop_serving(served)
    finally:
        serve.shutdown()


def kill_replica(app: str, deployment: str) -> int:
    """Kill one replica actor of `deployment` in `app` (no restart of that actor: Serve starts a new
    one); the pid it had."""
    import ray

    prefix = f"SERVE_REPLICA::{app}#{deployment}#"
    [named] = [a for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith(prefix)]
    actor = ray.get_actor(named["name"], namespace=named["namespace"])
    pid = ray.get(actor.__ray_call__.remote(lambda self: __import__("os").getpid()), timeout=60)
    ray.kill(actor, no_restart=True)
    return pid


def test_serving_goes_on_while_mlflow_is_down_and_the_pairs_are_written_when_it_is_back(served_versions, served):
    server, image = served_versions["server"], served_versions["image"]
    pairs_before = live.run_counts(served.live_run).pairs  # the module's session: what the other test left
    with Traffic(served.url, image).running() as traffic:
        traffic.wait_for(20)
        server.stop_signal = signal.SIGKILL
        killed_pid = server.proc.pid
        server.stop()
        down_from, answered_before = time.monotonic(), len(traffic.answered)
        time.sleep(DOWN_S)
        answered_while_down = len(traffic.answered) - answered_before
        served_versions["server"] = start_mlflow_server(*server.start_args, port=server.port)
        up_at = time.monotonic()
        traffic.wait_for(len(traffic.answered) + 20)
    post(f"{served.url}/flush", {}, timeout=300)  # the client's retries carry what waited to be written
    pairs = live.run_counts(served.live_run).pairs - pairs_before
    answered = len(traffic.answered)
    record(
        "serve_fault",
        fault=f"the MLflow server SIGKILLed for {DOWN_S} s, then restarted on its port",
        killed_pid=killed_pid,
        holds=f"{answered_while_down} requests answered while it was down, {len(traffic.failed)} failed; "
        f"{pairs} of {answered} pairs written once it was back",
        requests_answered=answered,
        answered_while_down=answered_while_down,
        requests_failed=len(traffic.failed),
        pairs_written=pairs,
        pairs_lost=answered - pairs,
        downtime_s=round(up_at - down_from, 1),
    )
    assert traffic.failed == []  # not one request failed: the endpoint never waits for MLflow
    assert answered_while_down > 0  # it answered while the server was down
    assert pairs == answered  # every pair of the session, those of the downtime too, reached the run


# killed in this order, in one serving session: the champion's last (its requests may fail while Serve
# starts another replica); each kill is a phase with traffic of its own, so its counts are its own
KILLS = ("candidate", "LiveLedger", "version")


def test_a_killed_replica_costs_what_is_counted(served_versions, served):
    """A replica killed under load (the shadow's, the ledger's, the champion's only one), each in turn:
    Serve starts another; the failed requests and the pairs lost are counted. The shadow and the
    ledger are off the response path: no request fails; a killed ledger loses only the rows it had
    not written (the gateway resends what it refused meanwhile). Requests to a champion without a
    replica wait for the next one (measured: none failed) or fail, counted."""
    model, image, settings = served_versions["model"], served_versions["image"], served.settings
    pairs_before = live.run_counts(served.live_run).pairs  # the module's session: what the other test left
    for deployment in KILLS:
        app = {"version": version_app_name(model, "1"), "candidate": version_app_name(model, "2")}.get(
            deployment, served.app_name
        )
        with Traffic(served.url, image).running() as traffic:
            traffic.wait_for(30)
            killed_at = time.monotonic()
            killed_pid = kill_replica(app, "LiveLedger" if deployment == "LiveLedger" else "version")
            traffic.wait_for(len(traffic.answered) + 30, timeout=300)
        post(f"{served.url}/flush", {}, timeout=120)
        pairs_now = live.run_counts(served.live_run).pairs
        answered, pairs, pairs_before = len(traffic.answered), pairs_now - pairs_before, pairs_now
        failed_after = [t - killed_at for t, _ in traffic.failed]
        record(
            "serve_fault",
            fault=f"the {WHICH[deployment]} killed (`ray.kill`)",
            killed_pid=killed_pid,
            holds=f"{WHAT[deployment]}: {len(traffic.failed)} failed requests, {answered - pairs} pairs lost",
            requests_answered=answered,
            requests_failed=len(traffic.failed),
            failing_for_s=round(max(failed_after), 1) if failed_after else 0,
            pairs_written=pairs,
            pairs_lost=answered - pairs,
        )
        if deployment != "version":
            assert traffic.failed == [], deployment  # the shadow and the ledger are off the response path
        if deployment == "LiveLedger":  # the gateway keeps the rows the ledger could not take, and resends
            assert 0 <= answered - pairs <= settings.chunk_rows + 64  # what the ledger held unwritten
        else:
            assert 0 <= answered - pairs <= answered, deployment
