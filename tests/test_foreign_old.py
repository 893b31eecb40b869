"""Any MLflow classifier as the old version (issue 91): a scikit-learn TF-IDF + logistic regression
pipeline trained on real tweets and registered with `mlflow.sklearn` is v1; Congruent trains v2
with KD from its probabilities; the NFR the registry records, the one the `congruent` evaluator
logs and the one counted by hand from both models' answers are equal; a second update against the
same v1 reads its answers from storage; `check` refuses what cannot work in one line, exit 2."""

from __future__ import annotations

import json

import mlflow
import numpy as np
import pandas as pd
import pytest

from conftest import SPEC_RESOURCES, run_update
from orchestrator.cli import main
from workers.data.text_tables import load_tweet_sentiment

TWEETS = {"dataset": "tweet-sentiment", "train_limit": 1500, "eval_limit": 600}


def pipeline():
    """TF-IDF of the frame's `text` column and a logistic regression."""
    from sklearn.compose import ColumnTransformer
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline

    return Pipeline([("tfidf", ColumnTransformer([("text", TfidfVectorizer(), "text")])), ("lr", LogisticRegression())])


def register(name: str, labels_of=lambda names: names, predict_fn: str = "predict_proba", rows: int = 3000):
    """The pipeline fitted on `rows` tweets (labels renamed by `labels_of`), registered as `name`; the fit."""
    from orchestrator.tracking.store import configure

    configure()  # the session's store (MLFLOW_TRACKING_URI): a test before may have pointed MLflow elsewhere
    tweets = load_tweet_sentiment()
    names = np.asarray(tweets.classes)[np.asarray(tweets.labels)]
    frame = pd.DataFrame({"text": list(tweets.texts), "label": names})
    frame = frame.iloc[np.random.default_rng(1).permutation(len(frame))[:rows]]
    fitted = pipeline().fit(frame, labels_of(frame["label"]))
    mlflow.set_experiment(f"{name}-v1")
    with mlflow.start_run():
        mlflow.sklearn.log_model(fitted, name="model", registered_model_name=name, pyfunc_predict_fn=predict_fn)
    return fitted


@pytest.fixture(scope="module")
def sklearn_v1():
    name = "tweets-foreign"
    return name, register(name)


def test_check_refuses_a_classes_only_model_an_unknown_class_and_a_missing_model(tmp_path, capsys):
    register("classes-only", predict_fn="predict", rows=400)
    register("unknown-class", labels_of=lambda labels: labels.replace("neutral", "meh"), rows=400)
    base = {"model": "m", "version": "v2", "arch": "text-linear", "method": {"name": "kd"}, "data": TWEETS}
    base |= {"storage": str(tmp_path / "runs"), "resources": SPEC_RESOURCES}
    expected = {
        "classes-only/1": "answers classes only",
        "unknown-class/1": "its class 'meh' is none of the data's",
        "models:/nowhere/3": "nowhere",
    }
    for old, says in expected.items():
        path = tmp_path / "spec.yaml"
        path.write_text(json.dumps({**base, "old": old}))
        capsys.readouterr()
        assert main(["check", str(path)]) == 2
        lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert len(lines) == 1 and says in lines[0] and old.removeprefix("models:/") in lines[0], lines


def test_bcwi_and_init_old_are_refused_and_auto_leaves_them_out(sklearn_v1, tmp_path, capsys):
    name, _ = sklearn_v1
    base = {"model": name, "version": "v2", "arch": "text-linear", "data": TWEETS, "old": f"{name}/1"}
    base |= {"storage": str(tmp_path / "runs"), "resources": SPEC_RESOURCES}
    path = tmp_path / "spec.yaml"
    path.write_text(json.dumps({**base, "method": {"name": "bcwi"}}))
    assert main(["check", str(path)]) == 2
    assert "model outside Congruent" in capsys.readouterr().err
    path.write_text(json.dumps({**base, "method": {"name": "auto"}}))
    assert main(["check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "outside Congruent" in out and "bcwi" in out, out


def test_a_kd_update_of_a_foreign_sklearn_v1_counts_its_flips_as_both_models_answer(
    sklearn_v1, ray_cluster, tmp_path, capsys
):
    from mlflow import MlflowClient

    from orchestrator.planning.preflight import preflight
    from pipelines.spec import parse_spec
    from workers.tasks.resolve import cached_splits

    name, fitted = sklearn_v1
    document = {
        "model": name,
        "version": "v2",
        "arch": "text-linear",
        "old": f"{name}/1",
        "data": TWEETS,
        "method": {"name": "kd"},
        "train": {"epochs": 2, "batch_size": 64},
        "storage": str(tmp_path / "runs"),
        "resources": {**SPEC_RESOURCES, "teacher_actors": 0},
    }
    result = run_update(document, tmp_path / "v2")
    assert result.registered_version == "2"

    # by hand: v1's own answers (sklearn) and v2's logits on the eval split, in the ledger's order
    splits = cached_splits(preflight(parse_spec(document)).data)
    texts, labels = list(splits.eval.texts), splits.eval.labels.numpy()
    classes = np.asarray(splits.eval.classes)
    old_right = fitted.predict(pd.DataFrame({"text": texts})) == classes[labels]
    new_right = np.load(tmp_path / "v2" / "predictions" / "new.npy").argmax(1) == labels
    negative = int((old_right & ~new_right).sum())
    assert negative > 0

    capsys.readouterr()
    assert main(["versions", name, "--json"]) == 0
    rows = {row["version"]: row for row in json.loads(capsys.readouterr().out)["versions"]}
    assert rows["2"]["foreign_parent"] == f"models:/{name}/1" and rows["2"]["parent_version"] is None
    assert rows["2"]["nfr"] == pytest.approx(negative / len(labels), abs=1e-6)

    mlflow.set_experiment(f"{name}-evaluate")
    with mlflow.start_run():
        evaluated = mlflow.models.evaluate(
            model=f"models:/{name}/2",
            data=pd.DataFrame({"text": texts, "label": classes[labels]}),
            targets="label",
            model_type="classifier",
            evaluators=["congruent"],
            evaluator_config={"congruent": {"baseline": f"models:/{name}/1"}},
        )
    assert evaluated.metrics["nfr"] == pytest.approx(negative / len(labels), abs=1e-6)

    # FD-LM with the old model's answers served by a pool actor (the first update's were in-process)
    pooled = {**SPEC_RESOURCES, "teacher_actors": 1}
    again = run_update(
        {**document, "version": "v2-fd", "method": {"name": "fd-lm"}, "resources": pooled}, tmp_path / "again"
    )
    assert again.registered_version == "3"
    client = MlflowClient()
    cached = {
        run.data.tags["mlflow.runName"]: run.data.metrics["old_answers_cached"]
        for run in client.search_runs([client.get_experiment_by_name(name).experiment_id])
        if "old_answers_cached" in run.data.metrics
    }
    assert cached == {"v2": 0.0, "v2-fd": 1.0}
    assert again.teacher_pool is not None and again.teacher_pool.batches_served > 0  # epoch 1's: then cached

    # the foreign v1 in the chain's matrix and as the champion the gate compares with: its answers are
    # those v2's run recorded beside its own ledger (ledger/parent)
    assert main(["versions", name, "--matrix", "--json"]) == 0
    matrix = json.loads(capsys.readouterr().out)["matrix"]
    assert matrix["versions"] == ["1", "2", "3"] and matrix["without_ledger"] == []
    assert matrix["nfr_matrix"][0][1] == pytest.approx(negative / len(labels))
    assert main(["compare", f"models:/{name}/1", f"models:/{name}/2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["pairs"][0]["nfr"] == pytest.approx(negative / len(labels))
    client.set_registered_model_alias(name, "champion", "1")
    assert main(["promote", name, "2", "--max-nfr", str(negative / len(labels) / 2)]) != 0
    assert str(client.get_registered_model(name).aliases["champion"]) == "1"
    assert main(["promote", name, "2", "--max-nfr", "0.5", "--max-er-increase", "0.5"]) == 0
    assert str(client.get_registered_model(name).aliases["champion"]) == "2"


def test_an_answer_table_gives_each_texts_own_answer_and_refuses_a_text_it_never_scored(tmp_path):
    import torch

    from workers.data.tokenizer import encode_texts, text_digest_words
    from workers.models.answer_table import DIGEST_INPUTS, AnswerTable, UnknownTexts, answer_logits
    from workers.models.checkpoints import ModelSettings, load_model, save_checkpoint

    texts = ["good film", "bad film", "so-so", "good film"]  # a copy keeps its first answer
    probabilities = np.array([[0.9, 0.1], [0.2, 0.8], [0.5, 0.5], [0.0, 1.0]])
    table = AnswerTable.of(text_digest_words(texts), answer_logits(probabilities))
    path = save_checkpoint(tmp_path / "answers.pt", table, ModelSettings("answer-table", 2, DIGEST_INPUTS))
    loaded, settings = load_model(path)
    ids, _ = encode_texts(settings.inputs, ["so-so", "good film", "bad film"])
    assert torch.softmax(loaded(ids), 1).numpy() == pytest.approx(np.array([[0.5, 0.5], [0.9, 0.1], [0.2, 0.8]]))
    with pytest.raises(UnknownTexts, match="none for 1 of these 2 texts"):
        loaded(encode_texts(settings.inputs, ["bad film", "a text nobody scored"])[0])


def test_a_version_measured_against_a_foreign_model_of_its_own_name_has_that_version_as_parent():
    from orchestrator.tracking.version_record import VersionRecord

    assert VersionRecord(version="2", foreign_parent="models:/tickets/1").parent_of("tickets") == "1"
    assert VersionRecord(version="2", foreign_parent="models:/other/1").parent_of("tickets") is None
    assert VersionRecord(version="3", parent_version="2").parent_of("tickets") == "2"
    tags = VersionRecord(version="2", foreign_parent="models:/tickets/1").to_tags()
    assert VersionRecord.from_tags(tags, "2").foreign_parent == "models:/tickets/1"
