"""`congruent predict` on a million text rows in Parquet shards, in a memory cgroup, against the
evaluation stage on the same data (issue 75).

    sudo python -m benchmarks.serving.predict_scale [--rows 1000000] [--shards 8] [--limit-gib 3]

Needs root and the cgroup v1 memory controller (benchmarks/streaming/memory_cap.py's method). The rows are
the tweet corpus's texts, each with a row number appended (every row a sample of its own), and
their sentiment, in `--shards` Parquet files. Then, with an embedded MLflow store in a work folder:

1. `congruent run` of a text-bag v1 streamed from those shards (`train_limit` keeps training
   short; the eval split is `eval_fraction` of the rows, all of them evaluated): its evaluation
   stage's samples/s is the eval split's rows over the stage's seconds (`seconds.evaluation`).
2. `congruent predict MODEL/1 SHARDS` over every row, inside a memory cgroup of `--limit-gib`: its
   rows/s (rows over the command's scoring seconds, Ray Data's start included), its peak
   (`memory.max_usage_in_bytes`: the driver, the embedded Ray, readers and the actor) and OOM kills.

Target: predict's rows/s ≥ 0.8 × the evaluation stage's samples/s, in bounded memory. Results:
docs/results/predict-scale-results.json and the section of docs/benchmarks/serving.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from benchmarks.cgroups import Cgroup
from benchmarks.report import RESULTS_DIR, ROOT, markdown_table, page, write_section

RESULTS = ROOT / RESULTS_DIR / "predict-scale-results.json"
HEADING = "## Batch inference: `congruent predict` on a million rows"
TARGET = 0.8
EVAL_FRACTION = 0.3


def write_shards(folder: Path, rows: int, shards: int) -> None:
    """`rows` tweets (the corpus repeated, each text with its row number appended) and their sentiment."""
    import pyarrow as pa  # type: ignore[import-untyped]
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    from workers.data.text_tables import load_tweet_sentiment

    tweets = load_tweet_sentiment()
    texts, labels = tweets.texts, [tweets.classes[int(k)] for k in tweets.labels]
    folder.mkdir(parents=True, exist_ok=True)
    per = -(-rows // shards)
    for shard in range(shards):
        numbers = range(shard * per, min(rows, (shard + 1) * per))
        table = {
            "text": [f"{texts[i % len(texts)]} #{i}" for i in numbers],
            "sentiment": [labels[i % len(texts)] for i in numbers],
        }
        pq.write_table(pa.table(table), folder / f"part-{shard:02d}.parquet")


def env_for(work: Path) -> dict[str, str]:
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{work}/mlflow.db", "PYTHONPATH": str(ROOT)}
    env.pop("RAY_ADDRESS", None)
    return env


def congruent(argv: list[str], work: Path, cgroup: Cgroup | None = None) -> dict[str, Any]:
    """`congruent ARGV --json` in `work` (inside `cgroup` when given); its JSON result and seconds."""
    command = [sys.executable, "-m", "orchestrator", *argv, "--json"]
    started = time.perf_counter()
    if cgroup is None:
        done = subprocess.run(command, cwd=work, env=env_for(work), capture_output=True, text=True)
    else:
        done = cgroup.run(command, work, env_for(work))
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:2])} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return {"result": json.loads(done.stdout.strip().splitlines()[-1]), "wall_s": time.perf_counter() - started}


def measure(rows: int, shards: int, limit_gib: float, work: Path) -> dict[str, Any]:
    data = work / "shards"
    write_shards(data, rows, shards)
    subprocess.run(["cat", *map(str, sorted(data.iterdir()))], stdout=subprocess.DEVNULL, check=True)  # page cache
    model = "predict-scale"
    spec = {
        "model": model,
        "version": "v1",
        "arch": "text-bag",
        "method": {"name": "none"},
        "data": {
            "path": str(data),
            "label_column": "sentiment",
            "streaming": True,
            "train_limit": 20_000,
            "eval_fraction": EVAL_FRACTION,
        },
        "train": {"epochs": 1, "lr": 0.5, "batch_size": 256, "seed": 0},
        "resources": {"student": {"cpus": 1}, "teacher_actors": 0},
        "storage": str(work / "storage"),
    }
    (work / "v1.yaml").write_text(yaml.safe_dump(spec))
    print(f"predict_scale: {rows:,} rows in {shards} shards; training v1 …", flush=True)
    run = congruent(["run", "v1.yaml", "--out", str(work / "v1")], work)
    record = json.loads((work / "v1" / "result.json").read_text())
    evaluation = {"rows": record["n_eval"], "seconds": record["seconds"]["evaluation"]}
    evaluation["rows_per_second"] = evaluation["rows"] / evaluation["seconds"]
    print(f"predict_scale: evaluation {evaluation['rows']:,} rows in {evaluation['seconds']:.1f} s", flush=True)

    cgroup = Cgroup("congruent-predict-scale", int(limit_gib * (1 << 30)))
    try:
        scored = congruent(["predict", f"{model}/1", str(data), "--out", str(work / "scored")], work, cgroup)
        memory = cgroup.figures()
    finally:
        cgroup.remove()
    summary = scored["result"]
    predict = {
        "rows": summary["new"]["rows"],
        "failed": summary["new"]["failed"],
        "seconds": summary["seconds"],
        "rows_per_second": summary["rows_per_second"],
        "wall_s": scored["wall_s"],
        "error_rate": summary["new"]["error_rate"],
        "peak_bytes": memory["peak_bytes"],
        "peak_resident_bytes": memory["peak_resident_bytes"],
        "limit_bytes": int(limit_gib * (1 << 30)),
        "oom_kills": memory["oom_kills"],
    }
    print(f"predict_scale: predict {predict['rows']:,} rows in {predict['seconds']:.1f} s", flush=True)
    return {
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "rows": rows,
        "shards": shards,
        "v1_run_s": run["wall_s"],
        "evaluation": evaluation,
        "predict": predict,
        "ratio": predict["rows_per_second"] / evaluation["rows_per_second"],
    }


def section(results: dict[str, Any]) -> str:
    e, p = results["evaluation"], results["predict"]
    verdict = "met" if results["ratio"] >= TARGET and p["oom_kills"] == 0 else "MISSED"
    return "\n".join(
        [
            HEADING,
            "",
            f"`python -m benchmarks.serving.predict_scale` ({results['date']}, {results['machine']}, one run): "
            f"{results['rows']:,} tweets (each with its row number, so every row is a sample of its own) in "
            f"{results['shards']} Parquet shards; a text-bag v1 trained streamed on them, then "
            f"`congruent predict` over every row inside a memory cgroup of {p['limit_bytes'] / (1 << 30):.1f} GiB "
            "(the driver, the embedded Ray, the zero-CPU readers and one scoring actor of 1 CPU).",
            "",
            markdown_table(
                ["", "rows", "seconds", "rows/s", "peak memory"],
                [
                    [
                        "evaluation stage of `congruent run` (eval split, 1 CPU)",
                        f"{e['rows']:,}",
                        f"{e['seconds']:.1f}",
                        f"{e['rows_per_second']:,.0f}",
                        "",
                    ],
                    [
                        "`congruent predict` (every row, 1 actor of 1 CPU)",
                        f"{p['rows']:,}",
                        f"{p['seconds']:.1f}",
                        f"{p['rows_per_second']:,.0f}",
                        f"{p['peak_bytes'] / (1 << 30):.2f} GiB",
                    ],
                ],
                align="lrrrr",
            ),
            "",
            f"predict's rows/s are {results['ratio']:.2f}× the evaluation stage's (target ≥ {TARGET}×: {verdict}); "
            f"its peak {p['peak_bytes'] / (1 << 30):.2f} GiB "
            f"(resident {p['peak_resident_bytes'] / (1 << 30):.2f} GiB), "
            f"{p['oom_kills']} OOM kills, {p['failed']} failed rows, ER {p['error_rate']:.1%}. The command's wall "
            f"time, Ray's start and the registry included: {p['wall_s']:.0f} s. predict's seconds count from "
            "the dataset's first read to its last row written (Ray Data's start included); the evaluation's "
            "from its task's start to its last chunk.",
            "",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--limit-gib", type=float, default=3.0)
    parser.add_argument("--no-write", action="store_true", help="print the results, write no docs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="predict-scale-") as tmp:
        results = measure(args.rows, args.shards, args.limit_gib, Path(tmp))
    print(json.dumps(results, indent=2))
    if not args.no_write:
        RESULTS.write_text(json.dumps(results, indent=2) + "\n")
        body = section(results).removeprefix(HEADING).strip()
        write_section(ROOT / page("serving"), HEADING, body)


if __name__ == "__main__":
    main()
