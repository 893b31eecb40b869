"""Does training with the protected samples (`train.protected_weight`) keep more of them than training
without? Issue 74's "train for it", measured with 3 seeds.

    python -m benchmarks.quality.protected_weight [--seeds 0 1 2] [--weights 1 4] [--report docs/benchmarks/quality.md]

Per seed, as a user runs it (embedded local Ray, a fresh MLflow store per unit, each unit in its own
process), on the built-in tweets: a table T of 6,000 tweets is the data; a pool P of 2,000 other
tweets is new data nobody trained nor evaluated on, cut in two halves P1 and P2.
- v1: `text-bag` on the first half of T's training split (champion).
- v2: no treatment on all of T; its negative flips against v1 on P1 (v1 right, v2 wrong) are a
  regression found on new data: `congruent protect` registers them (a table of text and label).
- v3: fd-lm from v1 on all of T (another seed than v2), without `train.protected_weight` and with
  each weight of `--weights`. Figures: the protected samples v3 gets wrong (each was right for the
  champion v1: the gate's protected flips), v3's NFR against v1 on P2 (the other half: samples that
  were not protected, like them), and v3's ER and NFR on T's eval split.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.report import RESULTS_DIR, markdown_table, run_unit_process, show_section

SECTION = "## Training with the protected samples (`train.protected_weight`)"
RESULTS = RESULTS_DIR / "protected-weight-results.json"
RESOURCES = {"replica": {"cpus": 1}, "student": {"cpus": 1}, "teacher_actors": 0}
DATA_ROWS, POOL_ROWS = 6000, 2000


def tables(folder: Path) -> tuple[Path, list[str], list[str]]:
    """T (parquet: text, sentiment) and the pool P's texts and label names, in one fixed shuffled
    order: every 4th tweet goes to P, the others to T, so no text of P is one of T's (copies aside:
    they share an id, and are then left out of training when T's val or eval holds them)."""
    import pyarrow as pa  # type: ignore[import-untyped]
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    from workers.data.text_tables import load_tweet_sentiment

    tweets = load_tweet_sentiment()
    names = [tweets.classes[int(label)] for label in tweets.labels]
    order = np.random.default_rng(0).permutation(len(tweets.texts)).tolist()  # the set is sorted by label
    data = [i for i in order if i % 4][:DATA_ROWS]
    pool = [i for i in order if not i % 4][:POOL_ROWS]
    path = folder / "tweets.parquet"
    pq.write_table(pa.table({"text": [tweets.texts[i] for i in data], "sentiment": [names[i] for i in data]}), path)
    return path, [tweets.texts[i] for i in pool], [names[i] for i in pool]


def negative_flips(old: np.ndarray, new: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Where the old answer is right and the new one wrong."""
    return (old == labels) & (new != labels)


def run_unit(seed: int, weights: list[int], out: Path) -> dict[str, Any]:
    """v1, v2, the protected set of v2's flips on P1, then v3 without and with each weight."""
    from orchestrator.driver.pipeline import run_pipeline
    from orchestrator.driver.predicted_versions import scored_version
    from orchestrator.driver.protect import protect
    from orchestrator.execution.cluster import connect
    from orchestrator.execution.watch import StageWatch
    from orchestrator.planning.preflight import preflight
    from orchestrator.tracking.promotion import set_champion
    from orchestrator.tracking.protected import protected_set
    from orchestrator.tracking.store import configure
    from orchestrator.views.progress import make_display
    from pipelines.spec import parse_spec
    from workers.models.protected_scoring import protected_answers as answers

    out.mkdir(parents=True, exist_ok=True)
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{out / 'mlflow.db'}"
    connect(None)
    configure()
    watch = StageWatch(make_display(True))
    path, pool_texts, pool_names = tables(out)
    data = {"path": str(path), "label_column": "sentiment"}
    common = {"model": "protected", "arch": "text-bag", "resources": RESOURCES, "storage": str(out / "runs")}

    def run(version: str, **fields: Any) -> Any:
        document = {**common, "version": version, "data": data, **fields}
        return run_pipeline(preflight(parse_spec(document)), out / version, watch)

    v1 = run("v1", data={**data, "subset": "half-samples"}, train={"seed": seed})
    set_champion("protected", v1.registered_version)
    classes = scored_version(f"protected/{v1.registered_version}").classes
    labels = np.array([classes.index(n) for n in pool_names], np.int64)
    half = len(pool_texts) // 2
    first, second = slice(0, half), slice(half, None)
    old = answers(v1.checkpoint, pool_texts)
    v2 = run("v2", train={"seed": seed + 100}, old=f"protected/{v1.registered_version}")
    flipped = np.flatnonzero(negative_flips(old[first], answers(v2.checkpoint, pool_texts[first]), labels[first]))
    table = out / "protected.csv"
    import pyarrow as pa
    import pyarrow.csv as pacsv  # type: ignore[import-untyped]

    chosen = {"text": [pool_texts[i] for i in flipped], "sentiment": [pool_names[i] for i in flipped]}
    pacsv.write_csv(pa.table(chosen), table)
    protect("protected", str(table), None)
    suite = protected_set("protected")
    assert suite is not None
    v1_on_suite = answers(v1.checkpoint, suite.inputs)
    arms: dict[str, Any] = {}
    for weight in [None, *weights]:
        label = "off" if weight is None else f"w{weight}"
        train: dict[str, Any] = {"seed": seed + 200, **({"protected_weight": weight} if weight else {})}
        started = time.perf_counter()
        v3 = run(f"v3-{label}", method={"name": "fd-lm"}, train=train, old=f"protected/{v1.registered_version}")
        on_suite = answers(v3.checkpoint, suite.inputs)
        on_second = answers(v3.checkpoint, pool_texts[second])
        arms[label] = {
            "weight": weight,
            "protected_flips": int(negative_flips(v1_on_suite, on_suite, suite.labels).sum()),
            "pool_nfr": float(negative_flips(old[second], on_second, labels[second]).mean()),
            "error_rate": v3.metrics["error_rate"],
            "nfr": v3.metrics["vs_old"]["nfr"],
            "seconds": round(time.perf_counter() - started, 1),
        }
    watch.close()
    return {
        "seed": seed,
        "protected": len(suite),
        "v2_pool_nfr": float(len(flipped) / half),
        "arms": arms,
    }


def percent(value: float) -> str:
    return f"{100 * value:.2f} %"


def report(results: dict[str, Any]) -> str:
    units = sorted(results["units"].values(), key=lambda u: u["seed"])
    if not units:
        return "No runs yet."
    labels = list(units[0]["arms"])
    headers = ["seed", "protected (v2's flips on P1)"]
    headers += [f"{a}: protected flipped, NFR on P2, eval ER, eval NFR" for a in labels]
    rows = []
    for unit in units:
        row = [str(unit["seed"]), str(unit["protected"])]
        for a in labels:
            arm = unit["arms"][a]
            row.append(
                f"**{arm['protected_flips']}**, {percent(arm['pool_nfr'])}, {percent(arm['error_rate'])}, "
                f"{percent(arm['nfr'])}"
            )
        rows.append(row)
    means = []
    for a in labels:
        kept = [1 - u["arms"][a]["protected_flips"] / max(1, u["protected"]) for u in units]
        er = [u["arms"][a]["error_rate"] for u in units]
        shown = f"{100 * np.mean(kept):.1f} ± {100 * np.std(kept):.1f} %"
        means.append(f"{a}: keeps {shown} of the protected set, eval ER {percent(float(np.mean(er)))}")
    return (
        f"Command: `python -m benchmarks.quality.protected_weight`, {results['date']}, 2 CPU cores, "
        f"{len(units)} seeds. "
        f"Data: {DATA_ROWS:,} built-in tweets (T); a pool of {POOL_ROWS:,} other tweets, halves P1 and P2. "
        "v1: `text-bag` on half of T's training split (champion); v2: no treatment on all of T; the protected set: "
        "v2's negative flips against v1 on P1 (`congruent protect`, a table). v3: fd-lm from v1 on all of T, "
        "without the protected samples (off) and with `train.protected_weight: w` (each protected sample in the "
        "train split w times). Per arm: protected samples v3 gets wrong (each right for v1: the gate's count), "
        "v3's NFR against v1 on P2 (samples like them, not protected), v3's ER and NFR on T's eval split.\n\n"
        f"{markdown_table(headers, rows)}\n\n" + "; ".join(means) + ".\n"
    )


def load() -> dict[str, Any]:
    return json.loads(RESULTS.read_text()) if RESULTS.exists() else {"units": {}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--weights", nargs="+", type=int, default=[1, 4])
    parser.add_argument("--report", default=None, help="write the section into this markdown file")
    parser.add_argument("--unit", nargs=2, metavar=("SEED", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.unit:
        seed, out = args.unit
        print(json.dumps(run_unit(int(seed), args.weights, Path(out))))
        return
    results = load()
    results["date"] = time.strftime("%Y-%m-%d")
    work = Path(tempfile.mkdtemp(prefix="protected-weight-"))
    for seed in args.seeds:
        if str(seed) in results["units"]:
            continue
        argv = [sys.executable, "-m", "benchmarks.quality.protected_weight", "--weights", *map(str, args.weights)]
        unit = run_unit_process([*argv, "--unit", str(seed), str(work / f"seed-{seed}")], f"seed {seed}")
        results["units"][str(seed)] = unit
        RESULTS.write_text(json.dumps(results, indent=2))
        flips = ", ".join(f"{a} {arm['protected_flips']}" for a, arm in unit["arms"].items())
        print(f"seed {seed}: {unit['protected']} protected; flipped by v3: {flips}", flush=True)
    show_section(report(results), args.report, SECTION)


if __name__ == "__main__":
    main()
