"""A v1 → v2 ELODI update on data larger than the memory it is allowed, inside one memory cgroup (issue 33).

    sudo python -m benchmarks.streaming.memory_cap [--scale 4] [--side 128] [--tiny 2000] [--images N]

Needs root and the cgroup v1 memory controller. For each size — a tiny run, the base size, and
`scale` × the base — an ImageFolder of JPEGs is generated (benchmarks/streaming/data_generator.py) and read
once from outside the cgroup, so the page cache of the inputs is not charged to the run. Then
`congruent run` of v1 (mlp-small, `data.streaming: true`) and of v2 (ELODI m 2, in-process
teachers) run one after the other in one cgroup: their drivers, the embedded Ray (GCS, raylet,
workers, object store) and every reader. The tiny run's peak (`memory.max_usage_in_bytes`) plus
1 GiB is the limit of the other two. The base size is the fewest thousand images whose in-memory
footprint — what the in-memory path would hold, summed over the processes that hold it at once (the
driver and the two replicas) — is 1.2 × that limit; `streaming: false` on it must fail in preflight
naming the memory it needs.

Reported: each run's peak (max_usage_in_bytes, and the sampled peak of its resident memory:
rss + shmem), OOM kills, wall time, each stage's samples/s, both versions registered; the scale run's
peak against the base's (target: within 10 %). Results: docs/results/memory-cap-results.json, the section
of docs/benchmarks/streaming.md and docs/results/memory-cap.png (memory over time).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.cgroups import CGROUPS, Cgroup
from benchmarks.report import RESULTS_DIR, ROOT, link, markdown_table, page, results_beside, write_section

HEADING = "## Data larger than its memory limit: a streamed update in a memory cgroup"
RESULTS = RESULTS_DIR / "memory-cap-results.json"
PLOT = RESULTS_DIR / "memory-cap.png"
GiB = float(1 << 30)
MODEL = "capped"


def specs(folder: Path, side: int) -> dict[str, str]:
    """v1, v2 (ELODI m 2 on v1 as old) and v2 with `streaming: false`, as YAML documents."""
    data = f"data: {{path: {folder}, image_size: {side}, streaming: true}}"
    documents = {
        "v1": f"model: {MODEL}\nversion: v1\n{data}\narch: mlp-small\ntrain: {{epochs: 1}}\n"
        "promote: {max_nfr: 1.0}\n",
        "v2": (
            f"model: {MODEL}\nversion: v2\n{data}\narch: mlp-small\nold: {MODEL}@champion\n"
            "method: {name: elodi, m: 2}\ntrain: {epochs: 1, student_epochs: 1}\nresources: {teacher_actors: 0}\n"
        ),
    }
    documents["v2-in-memory"] = documents["v2"].replace("streaming: true", "streaming: false")
    return documents


def generated(work: Path, count: int, side: int) -> Path:
    """The ImageFolder of `count` JPEGs (written once), its files read so their pages are cached
    outside the cgroup."""
    from benchmarks.streaming.data_generator import write_images

    folder = work / f"images-{count}-{side}"
    done = folder / ".complete"
    if not done.exists():
        shutil.rmtree(folder, ignore_errors=True)
        write_images(folder, count, side)
        done.touch()
    for path in folder.rglob("*.jpg"):
        path.read_bytes()
    return folder


def stage_rates(result: dict) -> dict[str, float]:
    """Samples/s of each training stage's last epoch, and of the evaluation (eval samples / its seconds)."""
    rates = {r["name"]: r["history"][-1]["samples_per_second"] for r in result.get("replicas") or []}
    if result.get("student"):
        rates["student" if result["method"] == "none" else "distillation"] = result["student"]["history"][-1][
            "samples_per_second"
        ]
    seconds = result.get("seconds", {})
    evaluate = next((v for k, v in seconds.items() if k.startswith("eval")), None)
    if evaluate:
        rates["evaluation"] = result["n_eval"] / evaluate
    return rates


def update_in_cgroup(folder: Path, side: int, work: Path, label: str, limit: int | None) -> dict[str, Any]:
    """v1 then v2 of MODEL on `folder`, in a fresh registry, inside one cgroup: the figures."""
    run_dir = work / f"run-{label}"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    for name, text in specs(folder, side).items():
        (run_dir / f"{name}.yaml").write_text(text)
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{run_dir / 'mlflow.db'}", "PYTHONPATH": str(ROOT)}
    env.pop("RAY_ADDRESS", None)
    congruent = [sys.executable, "-m", "orchestrator"]
    cgroup = Cgroup(f"congruent-memory-cap-{label}", limit)
    started = time.perf_counter()
    outcome: dict[str, Any] = {"label": label, "limit_bytes": limit, "versions": {}}
    try:
        for version in ("v1", "v2"):
            done = cgroup.run([*congruent, "run", f"{version}.yaml", "--json", "--out", f"out/{version}"], run_dir, env)
            if done.returncode != 0:
                outcome["failed"] = f"{version}: exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}"
                break
            result = json.loads((run_dir / "out" / version / "result.json").read_text())
            outcome["versions"][version] = {
                "registered_version": result["registered_version"],
                "error_rate": result["metrics"]["error_rate"],
                "nfr": (result["metrics"].get("vs_old") or {}).get("nfr"),
                "stages": stage_rates(result),
                "seconds": result["seconds"],
            }
        outcome["wall_seconds"] = time.perf_counter() - started
        outcome.update(cgroup.figures())  # the update's figures, before the check below
        if limit is not None:  # the same v2 with streaming: false, checked inside the same limit
            check = cgroup.run([*congruent, "check", "v2-in-memory.yaml"], run_dir, env)
            outcome["in_memory_check"] = {"exit": check.returncode, "line": check.stderr.strip()}
    finally:
        cgroup.remove()
    return outcome


def in_memory_footprint(folder: Path, side: int) -> dict[str, Any]:
    """What the in-memory path would hold: one copy's bytes, and the processes holding it at once."""
    import yaml

    from orchestrator.planning.plan import data_request
    from orchestrator.planning.streaming import in_memory_bytes, in_memory_holders
    from pipelines.spec import parse_spec

    spec = parse_spec(yaml.safe_load(specs(folder, side)["v2"]))
    copy = in_memory_bytes(data_request(spec))
    holders = in_memory_holders(spec)
    return {"copy_bytes": copy, "holders": holders, "total_bytes": copy * holders}


def base_images(limit: int, bytes_per_image: float) -> int:
    """The fewest thousands of images whose in-memory footprint is at least 1.2 × `limit`."""
    return int(math.ceil(1.2 * limit / bytes_per_image / 1000)) * 1000


def report(results: dict[str, Any]) -> str:
    runs = results["runs"]
    base, large = runs[1], runs[2]
    rows = []
    for run in runs:
        stages = {k: v for version in run["versions"].values() for k, v in version["stages"].items()}
        footprint = run["footprint"]
        rows.append(
            [
                run["label"],
                f"{run['images']:,}",
                f"{footprint['total_bytes'] / GiB:.1f} ({footprint['holders']} × {footprint['copy_bytes'] / GiB:.2f})",
                "none" if run["limit_bytes"] is None else f"{run['limit_bytes'] / GiB:.2f}",
                f"{run['peak_bytes'] / GiB:.2f}",
                f"{run['peak_resident_bytes'] / GiB:.2f}",
                str(run["oom_kills"]),
                "yes" if len(run["versions"]) == 2 and "failed" not in run else f"no: {run.get('failed')}",
                f"{run['wall_seconds']:.0f}",
                ", ".join(f"{k} {v:,.0f}" for k, v in stages.items()),
            ]
        )
    growth = large["peak_bytes"] / base["peak_bytes"] - 1
    headroom = results.get("headroom_gib", 1.0)
    check = base.get("in_memory_check", {})
    return "\n\n".join(
        [
            f"`python -m benchmarks.streaming.memory_cap --images {base['images']} --scale {results['scale']} "
            f"--side {results['side']} --headroom {headroom:g}` ({results['date']}, {results['machine']}, one run; "
            "raw figures in "
            f"{RESULTS}). v1 (mlp-small, 1 epoch) then v2 (ELODI m 2, in-process teachers, 1 epoch each), "
            f"{results['side']}-px colour JPEGs generated from Fashion-MNIST, `data.streaming: true`, each size "
            "in one memory cgroup holding both drivers, the embedded Ray and every reader; the inputs' page "
            f"cache is charged outside it. The limit is the tiny run's peak plus {headroom:g} GiB.",
            markdown_table(
                [
                    "run",
                    "images",
                    "in-memory footprint, GiB (holders × copy)",
                    "limit, GiB",
                    "peak (max_usage_in_bytes), GiB",
                    "peak resident (rss+shmem), GiB",
                    "OOM kills",
                    "both registered",
                    "wall, s",
                    "samples/s by stage (last epoch)",
                ],
                rows,
            ),
            f"- The {results['scale']}× run's peak against the base run's: {growth * 100:+.1f} % "
            f"(target within ±10 %: {'met' if abs(growth) <= 0.10 else 'MISSED'}).",
            f"- `streaming: false` on the base data inside the same limit: `congruent check` exit {check.get('exit')}: "
            f"`{check.get('line', '')}`",
            f"![memory over time]({link(PLOT, page('streaming'))})",
        ]
    )


def results_json(results: dict[str, Any]) -> str:
    """The results as indented JSON with each memory sample [seconds, usage, resident] on one line
    (a run samples every second: one number per line made the file tens of thousands of lines)."""
    number = r"([-+.\deE]+)"
    sample = rf"\[\s+{number},\s+{number},\s+{number}\s+\]"
    return re.sub(sample, r"[\1, \2, \3]", json.dumps(results, indent=1)) + "\n"


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    for run in results["runs"]:
        samples = run["samples"]
        ax.plot(
            [s[0] for s in samples], [s[1] / GiB for s in samples], label=f"{run['label']} ({run['images']:,} images)"
        )
    limit = results["runs"][1]["limit_bytes"]
    ax.axhline(limit / GiB, color="k", linestyle="--", label="limit")
    ax.set_xlabel("seconds")
    ax.set_ylabel("cgroup memory usage, GiB")
    ax.set_title("v1 → v2 ELODI on a streamed ImageFolder, one memory cgroup per run")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--images",
        type=int,
        default=0,
        help="images of the base run (default: the fewest thousands whose in-memory footprint is 1.2 × the limit)",
    )
    parser.add_argument("--scale", type=int, default=4)
    parser.add_argument("--side", type=int, default=128)
    parser.add_argument("--tiny", type=int, default=2000)
    parser.add_argument("--headroom", type=float, default=1.0, help="GiB above the tiny run's peak: the limit")
    parser.add_argument("--work", type=Path, default=Path("/tmp/congruent-memory-cap"))
    parser.add_argument("--out", type=Path, default=page("streaming"))
    args = parser.parse_args()
    if os.geteuid() != 0 or not (CGROUPS / "memory.limit_in_bytes").exists():
        print("memory_cap: needs root and the cgroup v1 memory controller at /sys/fs/cgroup/memory", file=sys.stderr)
        return 2
    args.work.mkdir(parents=True, exist_ok=True)
    labels = ["tiny", "base", f"{args.scale}x"]
    runs: list[dict[str, Any]] = []
    limit = None
    count = args.tiny
    for label in labels:
        folder = generated(args.work, count, args.side)
        print(f"{label}: {count:,} images, limit {'none' if limit is None else f'{limit / GiB:.2f} GiB'}", flush=True)
        run = update_in_cgroup(folder, args.side, args.work, label, limit)
        run.update(images=count, footprint=in_memory_footprint(folder, args.side))
        runs.append(run)
        print(
            f"  peak {run['peak_bytes'] / GiB:.2f} GiB, wall {run['wall_seconds']:.0f} s, "
            f"{run.get('failed') or 'both registered'}",
            flush=True,
        )
        if limit is None:
            limit = run["peak_bytes"] + int(args.headroom * GiB)
            count = args.images or base_images(limit, run["footprint"]["total_bytes"] / args.tiny)
        else:
            count = runs[1]["images"] * args.scale
    results = {
        "date": datetime.date.today().isoformat(),
        "machine": f"{os.cpu_count()} CPU cores, {platform.machine()}",
        "scale": args.scale,
        "side": args.side,
        "headroom_gib": args.headroom,
        "runs": runs,
    }
    RESULTS.write_text(results_json(results))
    plot(results, results_beside(args.out) / PLOT.name)
    write_section(args.out, HEADING, report(results))
    print(report(results))
    return 0 if all(len(r["versions"]) == 2 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
