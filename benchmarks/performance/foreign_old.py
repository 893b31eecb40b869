"""A foreign old model's answers: what the old-answers stage costs against the evaluation stage, and
that a second update against the same model reads them instead.

    python -m benchmarks.performance.foreign_old [--samples 16000] [--eval 4000] [--report]

v1 is a scikit-learn TF-IDF + logistic regression pipeline fitted on 3,000 random tweets and
registered with `mlflow.sklearn` (pyfunc_predict_fn="predict_proba") in a temporary MLflow store;
two updates (`text-linear`, one epoch: no treatment, then `method: auto`) run against it on the
embedded Ray of this machine. Reported: the texts the stage scored per second on Ray Data (one actor holding the pyfunc)
against the eval samples per second of the evaluation stage (v2 and the old model on the eval
split, with what publish records), both from the first update's run; the second update's stage
seconds (a read from storage). One run, ratios from the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import mlflow

from benchmarks.report import RESULTS_DIR, markdown_table, page, write_section

HEADING = "## A foreign old model's answers (text, CPU)"
RESULTS = RESULTS_DIR / "foreign-old-results.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=16000)
    parser.add_argument("--eval", type=int, default=4000)
    parser.add_argument("--report", action="store_true", help="rewrite the section from the saved results")
    args = parser.parse_args()
    if not args.report:
        with tempfile.TemporaryDirectory() as tmp:
            os.environ["MLFLOW_TRACKING_URI"] = os.environ["MLFLOW_REGISTRY_URI"] = f"sqlite:///{tmp}/mlflow.db"
            figures = measure(Path(tmp), args.samples, args.eval)
        results = {"args": {"samples": args.samples, "eval": args.eval}, "date": time.strftime("%Y-%m-%d")}
        RESULTS.write_text(json.dumps({**results, "figures": figures}, indent=2) + "\n")
    results = json.loads(RESULTS.read_text())
    write_section(page("performance"), HEADING, report(results))
    print(json.dumps(results["figures"], indent=2))
    print(f"wrote {RESULTS} and docs/benchmarks/performance.md: {HEADING}")


def report(results: dict[str, Any]) -> str:
    """The section's body from a saved results record."""
    first, second = results["figures"]["first"], results["figures"]["second"]
    samples, eval_samples = results["args"]["samples"], results["args"]["eval"]
    ratio = first["old_answers_texts_per_s"] / first["eval_samples_per_s"]
    table = markdown_table(
        ["update", "texts scored", "old answers s", "texts/s", "evaluation s", "eval samples/s", "ER", "NFR"],
        [
            [
                name,
                f"{run['old_answers_texts']:,.0f}",
                f"{run['old_answers_seconds']:.1f}" if not run["old_answers_cached"] else "read from storage",
                f"{run['old_answers_texts_per_s']:,.0f}" if not run["old_answers_cached"] else "—",
                f"{run['evaluation_seconds']:.1f}" if "evaluation_seconds" in run else "—",
                f"{run['eval_samples_per_s']:,.0f}" if "eval_samples_per_s" in run else "—",
                f"{100 * run['error_rate']:.2f} %",
                f"{100 * run['nfr']:.2f} %",
            ]
            for name, run in (("first: none", first), (f"second: auto → {second['chosen']}", second))
        ],
        "lrrrrrrr",
    )
    return (
        f"Command: `python -m benchmarks.performance.foreign_old --samples {samples} --eval {eval_samples}`, "
        f"{results['date']}, 2 CPU cores, embedded Ray, one run ({RESULTS.name}). v1: a scikit-learn "
        "TF-IDF + logistic regression pipeline registered with `mlflow.sklearn`; each update: `text-linear`, one "
        f"epoch, against `old: NAME/1`, first with no treatment, then `method: auto`.\n\n{table}\n\n"
        "The stage scores every distinct text of train, val and eval once (its wall includes starting the actor "
        f"and loading the pyfunc), at **{ratio:.1f}×** the evaluation stage's samples per second (which runs v2 "
        "and the old model's answer table over the eval split and computes what publish records); the second "
        "update reads the table from storage."
    )


def measure(folder: Path, samples: int, eval_samples: int) -> dict[str, dict[str, Any]]:
    """Both updates' figures: the old-answers stage's (from their MLflow runs) and the evaluation's."""
    from orchestrator.driver.pipeline import run_pipeline
    from orchestrator.execution.cluster import connect
    from orchestrator.execution.watch import StageWatch
    from orchestrator.planning.preflight import preflight
    from orchestrator.tracking.store import configure
    from pipelines.spec import parse_spec

    configure()
    register_v1("bench-foreign")
    connect(None)
    figures: dict[str, dict[str, Any]] = {}
    for name, version, method in (("first", "v2", "none"), ("second", "v2-auto", "auto")):
        document = {
            "model": "bench-foreign",
            "version": version,
            "arch": "text-linear",
            "old": "bench-foreign/1",
            "method": {"name": method},
            "data": {"dataset": "tweet-sentiment", "train_limit": samples, "eval_limit": eval_samples},
            "train": {"epochs": 1},
            "storage": str(folder / "runs"),
        }
        result = run_pipeline(preflight(parse_spec(document)), folder / version, StageWatch())
        client = mlflow.MlflowClient()
        experiment = client.get_experiment_by_name("bench-foreign")
        assert experiment is not None, "the update opened its experiment"
        run = client.search_runs([experiment.experiment_id], f"tags.mlflow.runName = '{version}'")[0]
        stage = {k: v for k, v in run.data.metrics.items() if k.startswith("old_answers_")}
        figures[name] = dict(stage)
        if "evaluation" in result.seconds:  # auto's result keeps its candidates' seconds instead
            evaluation = result.seconds["evaluation"]
            figures[name] |= {"evaluation_seconds": evaluation, "eval_samples_per_s": eval_samples / evaluation}
        figures[name] |= {"method": method, "chosen": str((result.auto or {}).get("chosen", method))}
        figures[name] |= {key: result.metrics["vs_old"][key] for key in ("nfr", "pfr")}
        figures[name]["error_rate"] = result.metrics["error_rate"]
    return figures


def register_v1(name: str) -> None:
    """A TF-IDF + logistic regression pipeline on 3,000 tweets drawn at random, registered as NAME/1."""
    import numpy as np
    import pandas as pd  # type: ignore[import-untyped]
    from sklearn.compose import ColumnTransformer
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline

    from workers.data.text_tables import load_tweet_sentiment

    tweets = load_tweet_sentiment()
    names = np.asarray(tweets.classes)[np.asarray(tweets.labels)]
    frame = pd.DataFrame({"text": list(tweets.texts), "label": names})
    frame = frame.iloc[np.random.default_rng(1).permutation(len(frame))[:3000]]
    fitted = Pipeline(
        [("tfidf", ColumnTransformer([("text", TfidfVectorizer(), "text")])), ("lr", LogisticRegression())]
    )
    fitted.fit(frame, frame["label"])
    mlflow.set_experiment(f"{name}-v1")
    with mlflow.start_run():
        mlflow.sklearn.log_model(fitted, name="model", registered_model_name=name, pyfunc_predict_fn="predict_proba")


if __name__ == "__main__":
    main()
