"""Benchmark `congruent serve`: requests/s and p50 / p99 latency of the endpoint with the champion
alone and with a candidate shadowed on every sample, on the same machine in one run, in three set-ups.

    python -m benchmarks.serving.serve_load [--clients 8] [--seconds 20] [--rounds 2]

In a temporary directory with its own MLflow store, two Fashion-MNIST versions are trained
(`mlp-small` on 2,000 images, then `mlp` on 4,000) and registered, v1 as the champion. Set-ups:

- **one node**: a local Ray on every core; the shadow gathers what comes within 5 ms into one
  candidate call and one ledger append (today's default), and
- the same with **50 ms** (`--shadow-coalesce-ms 50`): fewer calls from the gateway's event loop,
  the loop every request goes through;
- **candidate on its own node**: two Ray nodes started with `ray start`, each pinned to its own
  core (`taskset`) with one CPU: the champion fills the head's, so the candidate's replica is placed
  on the other node, whose core no version of the champion's path uses.

Each round serves, per set-up, v1 alone, then v1 with v2 shadowed (fraction 1); `--clients`
closed-loop clients (threads, keep-alive connections) send PNG images with fresh ids for `--seconds`
after a warm-up; rounds alternate so that drift in the machine's load falls on all, after one
shadowed serve per Ray that is not counted (a fresh Ray's first serve starts its workers). After each
shadowed serve the ledger is flushed and its pairs are counted against the answers the clients got
(pairs lost). Targets (issue 52): a shadow costs ≤ 10 % of p50 latency and ≤ 15 % of throughput.
Writes the section "Serving: a shadow's cost" of docs/benchmarks/serving.md and a latency plot.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import http.client
import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.report import page, results_beside, write_section
from benchmarks.serving.serve_load_report import SETUPS, body, plot
from orchestrator.serving.access import auth_headers

SECTION = "## Serving: a shadow's cost (`congruent serve`, CPU)"
MODEL = "serve-load"


@dataclass
class Load:
    """What the clients of one serve saw: each timed request's latency, the failures, and every
    request answered (the warm-up's too: the shadow pairs them all)."""

    latencies_s: list[float] = field(default_factory=list)
    failures: int = 0
    answered: int = 0
    seconds: float = 0.0

    @property
    def requests_per_s(self) -> float:
        return len(self.latencies_s) / self.seconds

    def percentile_ms(self, q: float) -> float:
        return float(np.percentile(self.latencies_s, q) * 1000)


def client(port: int, images: list[str], name: str, until: float, timed_from: float, load: Load) -> None:
    """One closed-loop client on one keep-alive connection: a request (one image, a fresh id), its
    answer, the next one."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    latencies, failures, answered, n = [], 0, 0, 0
    while (now := time.perf_counter()) < until:
        body = json.dumps({"inputs": [images[n % len(images)]], "ids": [f"{name}-{n}"]})
        n += 1
        try:
            connection.request("POST", "/predict", body, {"content-type": "application/json", **auth_headers()})
            response = connection.getresponse()
            response.read()
            ok = response.status == 200
        except (OSError, http.client.HTTPException):
            ok = False
            connection.close()
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        answered += ok
        if now >= timed_from:
            if ok:
                latencies.append(time.perf_counter() - now)
            else:
                failures += 1
    connection.close()
    load.latencies_s += latencies  # (list += from threads: one bytecode-level extend each, at the end)
    load.failures += failures
    load.answered += answered


def drive(port: int, images: list[str], clients: int, seconds: float, warmup_s: float, tag: str) -> Load:
    """`clients` closed-loop clients for warm-up + `seconds`."""
    load = Load(seconds=seconds)
    start = time.perf_counter()
    until, timed_from = start + warmup_s + seconds, start + warmup_s
    threads = [
        threading.Thread(target=client, args=(port, images, f"{tag}-{c}", until, timed_from, load))
        for c in range(clients)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return load


def png_images(count: int) -> list[str]:
    """The first `count` Fashion-MNIST test images as base64 PNG, as a client would send them."""
    import io

    from PIL import Image

    from workers.data import load_splits
    from workers.data.images import ImageSet

    held = load_splits("fashion-mnist").eval
    assert isinstance(held, ImageSet)
    images = held.images[:count]
    encoded = []
    for image in images:
        out = io.BytesIO()
        Image.fromarray(image[0].numpy()).save(out, format="PNG")  # uint8, 28 × 28
        encoded.append(base64.b64encode(out.getvalue()).decode())
    return encoded


def register_versions(work: Path) -> None:
    """v1 (mlp-small, 2,000 images) and v2 (mlp, 4,000), registered; v1 the champion."""
    from orchestrator.driver.pipeline import run_pipeline
    from orchestrator.execution.watch import StageWatch
    from orchestrator.planning.preflight import preflight
    from orchestrator.tracking import promotion
    from orchestrator.tracking.store import configure
    from pipelines.spec import parse_spec

    configure()
    for version, arch, limit in (("v1", "mlp-small", 2000), ("v2", "mlp", 4000)):
        document = {
            "model": MODEL,
            "version": version,
            "arch": arch,
            "method": {"name": "none"},
            "data": {"train_limit": limit, "eval_limit": 500},
            "train": {"epochs": 2, "batch_size": 128, "lr": 0.05, "seed": 0},
            "resources": {"replica": {"cpus": 1}, "student": {"cpus": 1}},
            "storage": str(work / "storage"),
        }
        run_pipeline(preflight(parse_spec(document)), work / version, StageWatch())
    promotion.set_champion(MODEL, "1")


def serve_round(images: list[str], shadow: bool, coalesce_ms: float, args: argparse.Namespace, tag: str) -> dict:
    """Serve v1 (with v2 shadowed when `shadow`), load it, stop it; its figures."""
    from orchestrator.driver.serve import serve_model, stop_serving
    from orchestrator.serving.settings import Resources, ServeSettings
    from orchestrator.tracking import live

    settings = ServeSettings(
        max_batch_size=args.max_batch_size, batch_wait_s=args.batch_wait_ms / 1000, shadow_coalesce_s=coalesce_ms / 1000
    )
    served = serve_model(MODEL, "2" if shadow else None, settings, port=args.port, resources=Resources(cpus=1))
    # a serve of the same two versions continues their session (live.py): count this serve's pairs only
    before = live.run_counts(served.live_run).pairs if served.live_run else 0
    beside = None
    if shadow:  # Serve places the gateway (no CPU asked) on either node: beside the candidate, or not
        from orchestrator.serving.handles import version_app_name

        beside = replica_node(served.app_name, "Gateway") == replica_node(version_app_name(MODEL, "2"), "version")
    try:
        load = drive(args.port, images, args.clients, args.seconds, args.warmup_s, tag)
    finally:
        stop_serving(served)  # the shadows in flight finish and the ledger writes before the app goes
    row = {
        "shadow": shadow,
        "requests": len(load.latencies_s),
        "failures": load.failures,
        "requests_per_s": load.requests_per_s,
        "p50_ms": load.percentile_ms(50),
        "p99_ms": load.percentile_ms(99),
        "latencies_s": load.latencies_s,
    }
    if shadow:
        assert served.live_run is not None
        row["pairs"] = live.run_counts(served.live_run).pairs - before
        row["answered"] = load.answered
        row["gateway_beside_candidate"] = beside
    return row


def replica_node(app: str, deployment: str) -> str:
    """The Ray node id of the (one) replica of `deployment` in `app`."""
    import ray

    prefix = f"SERVE_REPLICA::{app}#{deployment}#"
    [named] = [a for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith(prefix)]
    actor = ray.get_actor(named["name"], namespace=named["namespace"])
    where: Any = actor.__ray_call__.remote(lambda self: __import__("ray").get_runtime_context().get_node_id())
    return str(ray.get(where, timeout=60))


@contextlib.contextmanager
def two_pinned_nodes(work: Path) -> Iterator[str]:
    """A head (CPU core 0) and a worker node (core 1), one Ray CPU each, `ray start --block` under
    `taskset` in sessions of their own (stopped with them, and nothing else of Ray on this machine);
    the head's address once both nodes are up."""
    import signal
    import socket
    import subprocess
    import sys

    import ray

    command = str(Path(sys.executable).with_name("ray"))
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    head = [command, "start", "--head", "--block", "--port", str(port), "--num-cpus", "1"]
    head += ["--include-dashboard", "false", "--temp-dir", str(work / "ray")]
    worker = [command, "start", "--block", "--address", f"127.0.0.1:{port}", "--num-cpus", "1"]
    nodes = []
    try:
        for core, argv in ((0, head), (1, worker)):
            nodes.append(
                subprocess.Popen(
                    ["taskset", "-c", str(core), *argv],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
            deadline = time.monotonic() + 120
            while core == 0 and time.monotonic() < deadline:  # the head's GCS answers before a node joins it
                with socket.socket() as probe:
                    if probe.connect_ex(("127.0.0.1", port)) == 0:
                        break
                time.sleep(0.5)
        ray.init(address=f"127.0.0.1:{port}", logging_level=logging.ERROR, log_to_driver=False)
        deadline = time.monotonic() + 120
        while sum(node["Alive"] for node in ray.nodes()) < 2 and time.monotonic() < deadline:
            time.sleep(0.5)
        yield f"127.0.0.1:{port}"
    finally:
        ray.shutdown()
        for node in reversed(nodes):
            os.killpg(node.pid, signal.SIGTERM)  # `ray start --block` stops the processes it started
            node.wait(timeout=120)


def run_setups(ray_of: str, images: list[str], args: argparse.Namespace, rows: list[dict]) -> None:
    """Every round of the set-ups on one Ray: the champion alone, then each set-up's shadow."""
    names = [name for name, (ray, _) in SETUPS.items() if ray == ray_of]
    # a first serve on a fresh Ray starts its worker processes and imports (measured once: 35 % fewer
    # requests/s than the next): one shadowed serve, not counted, warms both versions' paths
    warm = argparse.Namespace(**{**vars(args), "seconds": 5.0})
    serve_round(images, True, SETUPS[names[0]][1], warm, f"{ray_of}-warm")
    for round_ in range(args.rounds):
        for name, shadow in [(names[0], False)] + [(name, True) for name in names]:
            row = serve_round(images, shadow, SETUPS[name][1], args, f"{ray_of}-r{round_}-{name[-5:]}-{shadow}")
            row |= {"round": round_, "setup": name}
            print(
                f"round {round_ + 1} {name if shadow else ray_of + ' alone'}: {row['requests_per_s']:.1f} req/s, "
                f"p50 {row['p50_ms']:.1f} ms, p99 {row['p99_ms']:.1f} ms, {row['failures']} failed",
                flush=True,
            )
            rows.append(row)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--warmup-s", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-batch-size", type=int, default=32)
    parser.add_argument("--batch-wait-ms", type=float, default=5.0)
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--out", default=page("serving"))
    args = parser.parse_args()
    out = Path(args.out).resolve()
    started = time.perf_counter()
    import ray
    from ray import serve

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{work / 'mlflow.db'}"
        # the replicas' logs stay in their files: this process is also the clients, printing them would cost it
        ray.init(num_cpus=os.cpu_count() or 2, logging_level=logging.ERROR, log_to_driver=False)
        register_versions(work)
        images = png_images(256)
        rows: list[dict] = []
        run_setups("one-node", images, args, rows)
        serve.shutdown()
        ray.shutdown()
        with two_pinned_nodes(work):
            run_setups("two-nodes", images, args, rows)
            serve.shutdown()
    wall_s = time.perf_counter() - started
    results = Path("benchmark-output/serve-load")
    results.mkdir(parents=True, exist_ok=True)
    (results / "results.json").write_text(
        json.dumps([{k: v for k, v in r.items() if k != "latencies_s"} for r in rows])
    )
    plot(rows, results_beside(out) / "serve-load-latency.png")
    write_section(out, SECTION, body(rows, args, wall_s))
    print(f"wrote {SECTION!r} to {out}")


if __name__ == "__main__":
    main()
