"""The `congruent` evaluator for `mlflow.models.evaluate` (orchestrator/tracking/flip_evaluator.py):
two scikit-learn pipelines trained on real tweets, neither trained by Congruent, the first
registered with `mlflow.sklearn`; the evaluator's NFR, PFR and error rates are those counted by
hand from both pipelines' own answers, per slice too; `validate_evaluation_results` gates on them."""

from __future__ import annotations

import mlflow
import numpy as np
import pandas as pd
import pytest
from mlflow.exceptions import MlflowException
from mlflow.models import MetricThreshold

from orchestrator.tracking.foreign_models import answers_of
from workers.confidence import wilson_upper
from workers.data.text_tables import load_tweet_sentiment


def pipeline(analyzer: str, c: float):
    """TF-IDF of the frame's `text` column (other columns dropped) and a logistic regression."""
    from sklearn.compose import ColumnTransformer
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline

    words = TfidfVectorizer(analyzer=analyzer, ngram_range=(1, 1) if analyzer == "word" else (2, 4))
    return Pipeline([("tfidf", ColumnTransformer([("text", words, "text")])), ("lr", LogisticRegression(C=c))])


@pytest.fixture(scope="module")
def tweets_and_models(tmp_path_factory):
    """(eval frame, v1's URI in the registry, the candidate's run URI, both pipelines)."""
    tweets = load_tweet_sentiment()
    names = np.asarray(tweets.classes)[np.asarray(tweets.labels)]
    frame = pd.DataFrame({"text": list(tweets.texts), "label": names})
    frame = frame.iloc[np.random.default_rng(0).permutation(len(frame))].reset_index(drop=True)  # it is in label order
    train_old, train_new, held = frame.iloc[0:6000:3], frame.iloc[1:9000:3], frame.iloc[30000:30800].copy()
    held["length"] = np.where(held["text"].str.len() > 80, "long", "short")
    old, new = pipeline("word", 1.0).fit(train_old, train_old["label"]), pipeline("char_wb", 4.0)
    new.fit(train_new, train_new["label"])
    name = f"sk-{tmp_path_factory.mktemp('evaluator').name}"[-60:]
    mlflow.set_experiment(name)
    with mlflow.start_run():
        mlflow.sklearn.log_model(old, name="model", registered_model_name=name)
    with mlflow.start_run():
        candidate = mlflow.sklearn.log_model(new, name="model").model_uri
    return held, f"models:/{name}/1", candidate, old, new


def evaluate(model_uri: str, data: pd.DataFrame, config: dict):
    with mlflow.start_run():
        return mlflow.models.evaluate(
            model=model_uri,
            data=data,
            targets="label",
            model_type="classifier",
            evaluators=["congruent"],
            evaluator_config={"congruent": config},
        )


def test_the_evaluator_counts_the_flips_of_two_foreign_classifiers_and_validation_gates_on_them(tweets_and_models):
    held, baseline, candidate, old, new = tweets_and_models
    assert "congruent" in mlflow.models.list_evaluators()  # registered by the package's entry point
    result = evaluate(candidate, held, {"baseline": baseline, "slice_columns": ["length"]})

    labels = held["label"].to_numpy()
    old_right, new_right = old.predict(held) == labels, new.predict(held) == labels  # by hand
    negative, positive = int((old_right & ~new_right).sum()), int((~old_right & new_right).sum())
    n = len(held)
    assert negative > 5  # the test means something: the update flips some of v1's right answers
    metrics = result.metrics
    assert metrics["nfr"] == negative / n and metrics["pfr"] == positive / n
    assert metrics["error_rate"] == (~new_right).sum() / n and metrics["baseline_error_rate"] == (~old_right).sum() / n
    assert metrics["nfr_upper"] == pytest.approx(wilson_upper(negative, n, 0.95))
    rel = (negative / n) / ((old_right.sum() / n) * ((~new_right).sum() / n))
    assert metrics["rel_nfr"] == pytest.approx(rel)
    for value in ("long", "short"):
        inside = (held["length"] == value).to_numpy()
        assert metrics[f"slice/length/{value}/n"] == inside.sum()
        assert metrics[f"slice/length/{value}/nfr"] == (old_right & ~new_right)[inside].sum() / inside.sum()
    flips = result.artifacts["congruent_flips"].content
    assert (flips["flip"] == "negative").sum() == negative and (flips["flip"] == "positive").sum() == positive
    assert flips["text"].tolist() == held["text"].iloc[flips["row"]].tolist()
    assert mlflow.get_run(result.run_id).data.metrics["nfr"] == negative / n  # logged to the run

    above = {"nfr": MetricThreshold(threshold=negative / n - 1e-9, greater_is_better=False)}
    with pytest.raises(MlflowException, match="nfr"):
        mlflow.validate_evaluation_results(above, result)
    within = {"nfr": MetricThreshold(threshold=negative / n, greater_is_better=False)}
    mlflow.validate_evaluation_results(within, result)  # passes: raises nothing


def test_a_bad_config_or_a_baseline_that_does_not_resolve_is_one_line(tweets_and_models):
    held, baseline, candidate, _, _ = tweets_and_models
    cases = {
        "no baseline": ({}, "baseline: Field required"),
        "an unknown key": ({"baseline": baseline, "slices": ["length"]}, "slices: Extra inputs are not permitted"),
        "a missing slice column": ({"baseline": baseline, "slice_columns": ["channel"]}, "['channel'] are not"),
        "a baseline that does not resolve": ({"baseline": "models:/no-such-model/1"}, "baseline models:/no-such"),
    }
    for case, (config, words) in cases.items():
        with pytest.raises(MlflowException) as raised:
            evaluate(candidate, held, config)
        assert words in raised.value.message and len(raised.value.message.splitlines()) == 1, case


def test_answers_are_read_as_class_names_whatever_the_pyfunc_returns():
    congruent = pd.DataFrame({"class": [0, 2], "name": ["cat", ""], "probability": [0.9, 0.6]})
    assert answers_of(congruent).tolist() == ["cat", "2"]  # a version without class names: its ids
    assert answers_of(np.array(["a", "b"])).tolist() == ["a", "b"]
    assert answers_of(pd.DataFrame({"p": [1, 0]})).tolist() == ["1", "0"]
    probabilities = pd.DataFrame({"neg": [0.7, 0.1], "pos": [0.3, 0.9]})
    assert answers_of(probabilities).tolist() == ["neg", "pos"]
    with pytest.raises(ValueError, match="without class names"):
        answers_of(np.array([[0.7, 0.3]]))


def test_a_foreign_model_that_raises_or_answers_unknown_classes_fails_its_rows_not_the_batch():
    """predict --compare's actor (tracking/foreign_models.py PyfuncAnswers): a model that raises on a
    batch, or answers a class the compared version lacks, is each row's error; a null text is its own."""
    from types import SimpleNamespace

    from orchestrator.tracking.foreign_models import NO_CLASS, PyfuncAnswers

    def scorer(predict) -> PyfuncAnswers:
        answers = object.__new__(PyfuncAnswers)  # its model given here: no MLflow store to load from
        answers.model, answers.column, answers.key = SimpleNamespace(predict=predict), "text", "old"
        answers.names = None  # not of the sklearn flavour
        answers.index = {"neg": 0, "pos": 1}
        return answers

    batch = {"id": np.array([1, 2, 3]), "payload": np.array(["good", None, "bad"], dtype=object)}
    labelled = scorer(lambda frame: np.array(["pos" if t == "good" else "meh" for t in frame["text"]]))(batch)
    assert labelled["class_old"].tolist() == [1, NO_CLASS, NO_CLASS]
    assert labelled["error_old"].tolist() == [
        "",
        "no input (null)",
        "answered 'meh', a class the compared version lacks",
    ]

    def raising(frame):
        raise RuntimeError("tokenizer missing\nTraceback ...")

    failed = scorer(raising)(batch)
    assert failed["class_old"].tolist() == [NO_CLASS] * 3
    assert failed["error_old"].tolist()[::2] == ["the model could not answer: tokenizer missing"] * 2
    short = scorer(lambda frame: np.array(["pos"]))(batch)  # one answer for two texts
    assert short["error_old"].tolist()[0] == "the model could not answer: 1 answers to 2 texts"
