"""The write-up of benchmarks.serving.serve_load: the shadow's cost per set-up, the rounds' table, the
latency plot (docs/benchmarks/serving.md, "Serving: a shadow's cost")."""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

import numpy as np

from benchmarks.report import markdown_table

P50_TARGET, THROUGHPUT_TARGET = 0.10, 0.15

SETUPS = {  # name: (its Ray, the shadow's coalescing in ms)
    "one node, 5 ms": ("one-node", 5.0),
    "one node, 50 ms": ("one-node", 50.0),
    "candidate on its own node": ("two-nodes", 5.0),
}


def costs(rows: list[dict], setup: str) -> tuple[float, float]:
    """(p50 cost, throughput cost) of the shadow in `setup`: the means of its rounds, shadowed against
    the champion alone on the same Ray."""
    ray_of = SETUPS[setup][0]
    plain = [r for r in rows if not r["shadow"] and SETUPS[r["setup"]][0] == ray_of]
    shadowed = [r for r in rows if r["shadow"] and r["setup"] == setup]

    def mean(group: list[dict], key: str) -> float:
        return float(np.mean([r[key] for r in group]))

    p50 = mean(shadowed, "p50_ms") / mean(plain, "p50_ms") - 1
    return p50, 1 - mean(shadowed, "requests_per_s") / mean(plain, "requests_per_s")


def body(rows: list[dict], args: argparse.Namespace, wall_s: float) -> str:
    table = markdown_table(
        [
            "round",
            "set-up",
            "serve",
            "requests/s",
            "p50 ms",
            "p99 ms",
            "failed requests",
            "pairs in the ledger",
            "gateway beside the candidate",
        ],
        [
            [
                str(r["round"] + 1),
                SETUPS[r["setup"]][0].replace("-", " ") if not r["shadow"] else r["setup"],
                "champion + shadow" if r["shadow"] else "champion alone",
                f"{r['requests_per_s']:.1f}",
                f"{r['p50_ms']:.1f}",
                f"{r['p99_ms']:.1f}",
                str(r["failures"]),
                f"{r['pairs']:,} (answered {r['answered']:,})" if r["shadow"] else "",
                {True: "yes", False: "no"}.get(r.get("gateway_beside_candidate"), ""),  # type: ignore[arg-type]
            ]
            for r in rows
        ],
    )
    verdicts = []
    for setup in SETUPS:
        p50, throughput = costs(rows, setup)
        rates = [r["requests_per_s"] for r in rows if r["shadow"] and r["setup"] == setup]
        verdicts.append(
            [
                setup,
                f"{p50:+.1%} ({'met' if p50 <= P50_TARGET else 'missed'})",
                f"{throughput:.1%} ({'met' if throughput <= THROUGHPUT_TARGET else 'missed'})",
                f"{min(rates):.0f}–{max(rates):.0f}",
            ]
        )
    summary = markdown_table(
        [
            "set-up",
            f"p50 latency cost (target ≤ {P50_TARGET:.0%})",
            f"throughput cost (≤ {THROUGHPUT_TARGET:.0%})",
            "shadowed requests/s, lowest–highest round",
        ],
        verdicts,
    )
    command = (
        f"python -m benchmarks.serving.serve_load --clients {args.clients} --seconds {args.seconds:g} "
        f"--rounds {args.rounds}"
    )
    return f"""`{command}`; \
{time.strftime("%Y-%m-%d")}, {platform.machine()}, {os.cpu_count()} CPU(s), {wall_s / 60:.1f} min in all. \
Fashion-MNIST: v1 `mlp-small` serves, v2 `mlp` is the shadow on every sample; one replica of each (1 CPU, \
one torch thread), batches up to {args.max_batch_size} samples waiting {args.batch_wait_ms:g} ms; \
{args.clients} closed-loop clients in the benchmark's own process (keep-alive HTTP, one PNG image a request, \
a fresh id each) for {args.seconds:g} s after a {args.warmup_s:g} s warm-up, after one uncounted shadowed \
serve on each Ray. Set-ups (the module docstring): \
on **one node** Ray's proxy, the gateway, both versions, the ledger and the clients share the machine's \
cores, the shadow gathering its samples for 5 ms (the default) or **50 ms** (`--shadow-coalesce-ms 50`) \
before one candidate call and one ledger append; with the **candidate on its own node** two Ray nodes run \
pinned to one core each (`taskset`), the champion's replica and the proxy on the head's, the candidate's on \
the other; Serve places the gateway and the ledger (no CPU asked) on either.

{summary}

The shadow's cost in each set-up is against the champion alone on the same Ray, the means of \
{args.rounds} round(s):

{table}

Pairs in the ledger count every request answered with the shadow on, warm-up included (`answered`), \
read back from the session's parquet chunks after the graceful stop: equal means no pair was lost.

![latency](../results/serve-load-latency.png)
"""


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4))
    groups = [(f"{ray.replace('-', ' ')} alone", False, ray) for ray in ("one-node", "two-nodes")]
    groups += [(f"shadow: {name}", True, name) for name in SETUPS]
    for label, shadow, which in groups:
        chosen = [
            r["latencies_s"]
            for r in rows
            if r["shadow"] == shadow and (r["setup"] == which or (not shadow and SETUPS[r["setup"]][0] == which))
        ]
        if not chosen:
            continue
        latencies = np.sort(np.concatenate(chosen)) * 1000
        axis.plot(latencies, np.arange(1, len(latencies) + 1) / len(latencies), label=label)
    axis.set_xscale("log")
    axis.set_xlabel("latency (ms, log)")
    axis.set_ylabel("share of requests")
    axis.set_title("congruent serve: latency with and without a shadow")
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
