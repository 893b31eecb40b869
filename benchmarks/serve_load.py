"""Benchmark `congruent serve`: requests/s and p50 / p99 latency of the endpoint with the champion
alone and with a candidate shadowed on every sample, on the same machine in one run.

    python -m benchmarks.serve_load [--clients 8] [--seconds 20] [--rounds 2] [--samples 1]

On a local Ray in a temporary directory with its own MLflow store, two Fashion-MNIST versions are
trained (`mlp-small` on 2,000 images, then `mlp` on 4,000) and registered, v1 as the champion.
Each round serves v1 alone, then v1 with v2 shadowed (fraction 1), and `--clients` closed-loop
clients (threads, keep-alive connections) send PNG images with fresh ids for `--seconds` after a
warm-up; rounds alternate the two so that drift in the machine's load falls on both. After each
shadowed serve the ledger is flushed and its pairs are counted against the answers the clients got
(pairs lost). Targets (issue 52): a shadow costs ≤ 10 % of p50 latency and ≤ 15 % of throughput.
Writes the section "Serving: a shadow's cost" of docs/benchmarks.md and a latency plot.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import logging
import os
import platform
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from benchmarks.report import markdown_table, write_section
from orchestrator.serving.access import auth_headers

SECTION = "## Serving: a shadow's cost (`congruent serve`, CPU)"
MODEL = "serve-load"
P50_TARGET, THROUGHPUT_TARGET = 0.10, 0.15


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


def serve_round(images: list[str], shadow: bool, args: argparse.Namespace, tag: str) -> dict:
    """Serve v1 (with v2 shadowed when `shadow`), load it, stop it; its figures."""
    from orchestrator.driver.serve import serve_model, stop_serving
    from orchestrator.serving.settings import Resources, ServeSettings
    from orchestrator.tracking import live

    settings = ServeSettings(max_batch_size=args.max_batch_size, batch_wait_s=args.batch_wait_ms / 1000)
    served = serve_model(MODEL, "2" if shadow else None, settings, port=args.port, resources=Resources(cpus=1))
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
        row["pairs"] = live.run_counts(served.live_run).pairs
        row["answered"] = load.answered
    return row


def body(rows: list[dict], args: argparse.Namespace, wall_s: float) -> str:
    plain = [r for r in rows if not r["shadow"]]
    shadowed = [r for r in rows if r["shadow"]]

    def mean(group: list[dict], key: str) -> float:
        return float(np.mean([r[key] for r in group]))

    p50_cost = mean(shadowed, "p50_ms") / mean(plain, "p50_ms") - 1
    throughput_cost = 1 - mean(shadowed, "requests_per_s") / mean(plain, "requests_per_s")
    table = markdown_table(
        ["round", "serve", "requests/s", "p50 ms", "p99 ms", "failed requests", "pairs in the ledger"],
        [
            [
                str(i // 2 + 1),
                "champion + shadow" if r["shadow"] else "champion alone",
                f"{r['requests_per_s']:.1f}",
                f"{r['p50_ms']:.1f}",
                f"{r['p99_ms']:.1f}",
                str(r["failures"]),
                f"{r['pairs']:,} (answered {r['answered']:,})" if r["shadow"] else "",
            ]
            for i, r in enumerate(rows)
        ],
    )
    verdict = (
        f"A shadow costs **{p50_cost:+.1%} of p50 latency** (target ≤ {P50_TARGET:.0%}: "
        f"{'met' if p50_cost <= P50_TARGET else 'missed'}) and **{throughput_cost:.1%} of throughput** "
        f"(target ≤ {THROUGHPUT_TARGET:.0%}: {'met' if throughput_cost <= THROUGHPUT_TARGET else 'missed'}), "
        f"the means of {args.rounds} round(s) each."
    )
    command = (
        f"python -m benchmarks.serve_load --clients {args.clients} --seconds {args.seconds:g} --rounds {args.rounds}"
    )
    return f"""`{command}`; \
{time.strftime("%Y-%m-%d")}, {platform.machine()}, {os.cpu_count()} CPU(s), {wall_s / 60:.1f} min in all. \
Fashion-MNIST: v1 `mlp-small` serves, v2 `mlp` is the shadow on every sample; one replica of each (1 CPU, \
one torch thread), batches up to {args.max_batch_size} samples waiting {args.batch_wait_ms:g} ms; \
{args.clients} closed-loop clients in the benchmark's own process (keep-alive HTTP, one PNG image a request, \
a fresh id each) for {args.seconds:g} s after a {args.warmup_s:g} s warm-up. Everything (Ray's proxy, the \
gateway, both versions, the ledger and the clients) shares the machine's cores, so the shadow's forward \
competes with the champion's: the cost is an upper bound of what a shadow on its own node costs.

{table}

{verdict} Pairs in the ledger count every request answered with the shadow on, warm-up included \
(`answered`), read back from the session's parquet chunks after the graceful stop: equal means no pair \
was lost.

Where a shadow's cost goes: the gateway coalesces the shadowed samples of the requests that come \
within 5 ms into one candidate call and one ledger append (orchestrator/serving/shadow.py); what \
remains is the candidate's forward and the gateway's extra work, on the same cores as the champion's. \
A candidate on a node of its own (`--ray-address` to a cluster) takes its forward off them.

![latency](serve-load-latency.png)
"""


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6, 3.5))
    for shadow, colour in ((False, "tab:blue"), (True, "tab:orange")):
        latencies = np.sort(np.concatenate([r["latencies_s"] for r in rows if r["shadow"] == shadow])) * 1000
        label = "champion + shadow" if shadow else "champion alone"
        axis.plot(latencies, np.arange(1, len(latencies) + 1) / len(latencies), color=colour, label=label)
    axis.set_xscale("log")
    axis.set_xlabel("latency (ms, log)")
    axis.set_ylabel("share of requests")
    axis.set_title("congruent serve: latency with and without a shadow")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--warmup-s", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-batch-size", type=int, default=32)
    parser.add_argument("--batch-wait-ms", type=float, default=5.0)
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--out", default="docs/benchmarks.md")
    args = parser.parse_args()
    out = Path(args.out).resolve()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{work / 'mlflow.db'}"
        import ray

        # the replicas' logs stay in their files: this process is also the clients, printing them would cost it
        ray.init(num_cpus=os.cpu_count() or 2, logging_level=logging.ERROR, log_to_driver=False)
        register_versions(work)
        images = png_images(256)
        rows = []
        for round_ in range(args.rounds):
            for shadow in (False, True):
                row = serve_round(images, shadow, args, f"r{round_}-{'s' if shadow else 'p'}")
                print(
                    f"round {round_ + 1} {'shadow' if shadow else 'plain '}: {row['requests_per_s']:.1f} req/s, "
                    f"p50 {row['p50_ms']:.1f} ms, p99 {row['p99_ms']:.1f} ms, {row['failures']} failed",
                    flush=True,
                )
                rows.append(row)
        ray.shutdown()
    wall_s = time.perf_counter() - started
    results = Path("benchmark-output/serve-load")
    results.mkdir(parents=True, exist_ok=True)
    (results / "results.json").write_text(
        json.dumps([{k: v for k, v in r.items() if k != "latencies_s"} for r in rows])
    )
    plot(rows, out.parent / "serve-load-latency.png")
    write_section(out, SECTION, body(rows, args, wall_s))
    print(f"wrote {SECTION!r} to {out}")


if __name__ == "__main__":
    main()
