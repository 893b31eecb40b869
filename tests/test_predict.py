"""`congruent predict` (orchestrator/driver/predict.py): registered versions score real tweets in
parquet shards on Ray Data; `--compare` gives the NFR `congruent compare` gives on the two versions'
prediction files, and the registry's matrix where the data overlaps their ledgers; an image version
writes an undecodable file as a failed row; bad input is one line and exit 2, with nothing written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import mlflow
import numpy as np
import pytest

from conftest import run_update
from orchestrator.cli import main
from orchestrator.tracking import registry
from orchestrator.tracking.artifact_cache import cache_root
from orchestrator.tracking.ledger import COMPARED, read_ledger
from orchestrator.tracking.version_refs import VersionRef
from reliability_records import record
from test_serving import png
from workers.data.keys import key_ids
from workers.models.checkpoints import read_checkpoint
from workers.prediction_files import read_predictions


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([*argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="module")
def text_versions(ray_cluster, tweet_shards, tmp_path_factory):
    """Two text-bag versions of one model, on the shards' `text`/`sentiment` columns: 1 epoch and seed
    0, then 2 epochs and seed 1 (their ERs differ, so NFR ≠ PFR)."""
    folder, _ = tweet_shards
    tmp = tmp_path_factory.mktemp("predict-text")
    model = f"predict-text-{tmp.name}"[-60:]
    for seed, epochs, version in ((0, 1, "v1"), (1, 2, "v2")):
        document = {
            "model": model,
            "version": version,
            "arch": "text-bag",
            "method": {"name": "none"},
            "data": {"path": str(folder), "text_column": "text", "label_column": "sentiment"},
            "train": {"epochs": epochs, "lr": 0.5, "batch_size": 64, "seed": seed},
            "resources": {"student": {"cpus": 1}, "teacher_actors": 0, "fresh_stage_workers": False},
            "storage": str(tmp / "storage"),
        }
        run_update(document, tmp / version)
    return model, folder


def test_predict_compare_gives_the_nfr_of_compare_and_of_the_registry_matrix(text_versions, capsys, tmp_path):
    model, folder = text_versions
    out = tmp_path / "out"
    code, stdout, err = cli(
        capsys,
        "predict",
        f"{model}/2",
        str(folder),
        "--out",
        str(out),
        "--compare",
        f"{model}/1",
        "--json",
        "--batch-size",
        "200",
    )
    assert code == 0, err
    summary = json.loads(stdout)
    assert summary["new"]["rows"] == summary["old"]["rows"] == 3000  # every row of the three shards, once
    assert summary["new"]["failed"] == 0 and summary["new"]["labelled"] == 3000
    pair = summary["pair"]
    assert pair["compared"] == 3000 and pair["n"] == 3000
    assert 0 < pair["disagreement"] < 0.5 and 0 < pair["nfr"] < pair["disagreement"]
    assert pair["nfr"] - pair["pfr"] == pytest.approx(summary["new"]["error_rate"] - summary["old"]["error_rate"])
    assert pair["nfr"] != pair["pfr"]

    new, old = (read_predictions(out / f"{model}-v{v}") for v in (2, 1))
    assert len(new["ids"]) == 3000 and len(np.unique(new["ids"])) > 2900  # ids by text: copies share one
    errors = np.count_nonzero(new["class_ids"] != new["labels"])
    assert summary["new"]["error_rate"] == pytest.approx(errors / 3000)

    # `congruent compare` on the two prediction folders: the same NFR and PFR, and ERs
    code, stdout, err = cli(capsys, "compare", str(out / f"{model}-v1"), str(out / f"{model}-v2"), "--json")
    assert code == 0, err
    compared = json.loads(stdout)
    assert compared["n"] == 3000
    assert compared["pairs"][0]["nfr"] == pytest.approx(pair["nfr"])
    assert compared["pairs"][0]["pfr"] == pytest.approx(pair["pfr"])
    assert compared["error_rate"] == pytest.approx([summary["old"]["error_rate"], summary["new"]["error_rate"]])

    # the registry's matrix counts the eval split's samples: the predictions of those samples are the
    # ledgers' classes, sample by sample, so the NFR on them is the matrix's
    names, matrix, shared = registry.chain_matrix(model)
    assert names == ["1", "2"] and shared[0][1] > 100
    ledgers = [read_ledger(registry.ledger_path(registry.run_of(VersionRef(model, v))), COMPARED) for v in names]
    for ledger, predicted in zip(ledgers, (old, new)):
        _, in_ledger, in_predicted = np.intersect1d(ledger["ids"], predicted["ids"], return_indices=True)
        assert len(in_ledger) == len(np.unique(ledger["ids"]))  # every eval sample is in the shards
        assert (ledger["class_ids"][in_ledger] == predicted["class_ids"][in_predicted]).mean() >= 0.99
    code, stdout, err = cli(
        capsys, "compare", *(str(registry.ledger_path(registry.run_of(VersionRef(model, v)))) for v in names), "--json"
    )
    assert code == 0, err
    assert json.loads(stdout)["pairs"][0]["nfr"] == pytest.approx(matrix[0][1])
    eval_ids = ledgers[1]["ids"]
    on_eval = [{k: f[k][np.isin(f["ids"], eval_ids)] for k in ("ids", "labels", "class_ids")} for f in (old, new)]
    flips = np.count_nonzero(
        (on_eval[0]["class_ids"] == on_eval[0]["labels"]) & (on_eval[1]["class_ids"] != on_eval[1]["labels"])
    )
    assert flips / len(on_eval[1]["ids"]) == pytest.approx(matrix[0][1], abs=0.01)


def test_predict_refuses_bad_input_in_one_line_and_writes_nothing(text_versions, capsys, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    model, folder = text_versions
    reviews = tmp_path / "reviews.parquet"
    pq.write_table(pa.table({"review": ["fine", "awful"], "stars": [5, 1]}), reviews)
    images = tmp_path / "images"
    images.mkdir()
    (images / "a.png").write_bytes(png(np.zeros((28, 28), np.uint8)))
    out = tmp_path / "out"
    cases = {
        "no text column": ([f"{model}/1", str(reviews)], "no column 'text'"),
        "a named label column the data lacks": (
            [f"{model}/1", str(folder), "--label-column", "stars"],
            "no column 'stars'",
        ),
        "images for a text version": ([f"{model}/1", str(images)], "no .csv"),
        "a version that does not exist": ([f"{model}/9", str(folder)], "no such registered model version"),
        "no data": ([f"{model}/1", str(tmp_path / "nothing.csv")], "no .csv"),
        "the same version twice": ([f"{model}/1", str(folder), "--compare", f"{model}/1"], "itself"),
    }
    padded = tmp_path / "padded.csv"
    padded.write_text('text,sentiment\n"  a fine day ",positive\na fine day,positive\n')
    code, stdout, err = cli(capsys, "predict", f"{model}/1", str(padded), "--out", str(tmp_path / "padded"), "--json")
    assert code == 0, err
    ids = read_predictions(tmp_path / "padded" / f"{model}-v1")["ids"]
    assert ids.tolist() == key_ids(["a fine day"]).tolist() * 2  # a text's id is its stripped content's

    code, stdout, err = cli(capsys, "predict", f"{model}/2", str(padded), "--out", str(tmp_path / "padded"))
    assert code == 2 and "summary.json: already holds an earlier prediction's summary" in err, err  # not overwritten
    assert not (tmp_path / "padded" / f"{model}-v2").exists()

    for case, (argv, words) in cases.items():
        code, stdout, err = cli(capsys, "predict", *argv, "--out", str(out))
        assert code == 2, case
        assert len(err.strip().splitlines()) == 1 and words in err, (case, err)
        assert not any(out.rglob("*.parquet")), case
    record("serving_security", check="predict refuses --compare naming the version itself (one folder, two writers) "
           "and an --out whose summary.json an earlier prediction wrote: nothing overwritten", passed=True)  # fmt: skip

    # a version whose checkpoint in the artifact store changed since registration (no cached copy)
    ref = VersionRef(model, "1")
    run_id = registry.run_of(ref)
    stored = Path(
        mlflow.MlflowClient().get_run(run_id).info.artifact_uri.removeprefix("file://"), "checkpoint", "model.pt"
    )
    original = stored.read_bytes()
    shutil.rmtree(cache_root() / run_id, ignore_errors=True)
    try:
        stored.write_bytes(original[:-16] + bytes(16))
        code, stdout, err = cli(capsys, "predict", f"{model}/1", str(folder), "--out", str(out))
        assert code == 2 and len(err.strip().splitlines()) == 1 and "changed since" in err, err
        assert not any(out.rglob("*.parquet"))
    finally:
        stored.write_bytes(original)


def test_an_image_version_writes_a_file_that_does_not_decode_as_a_failed_row(
    ray_cluster, spec_document, fashion_mnist, capsys, tmp_path
):
    model = f"predict-image-{tmp_path.name}"[-60:]
    run_update(spec_document(model=model, version="v1", data={"train_limit": 1000, "eval_limit": 200}), tmp_path / "v1")
    tree = tmp_path / "tree"
    classes = fashion_mnist.eval.classes
    eval_set = fashion_mnist.eval
    kept = [i for i in range(len(eval_set.labels)) if "/" not in classes[int(eval_set.labels[i])]][:60]
    for i in kept:  # a class folder's name is its class ("T-shirt/top" cannot be one)
        label = int(eval_set.labels[i])
        (tree / classes[label]).mkdir(parents=True, exist_ok=True)
        (tree / classes[label] / f"{i}.png").write_bytes(png(eval_set.images[i][0].numpy()))
    (tree / classes[1] / "broken.png").write_bytes(b"\x89PNG not really")
    out = tmp_path / "out"
    code, stdout, err = cli(capsys, "predict", f"{model}/1", str(tree), "--out", str(out), "--json")
    assert code == 0, err
    summary = json.loads(stdout)
    assert summary["new"]["rows"] == 61 and summary["new"]["failed"] == 1 and summary["new"]["labelled"] == 60
    import pyarrow.parquet as pq

    table = pq.read_table(out / f"{model}-v1").to_pandas()
    broken = table[table["error"].notna()]
    assert len(broken) == 1 and broken["class"].isna().all() and "cannot read image" in broken["error"].iloc[0]
    answered = table[table["error"].isna()].astype({"class": int, "label": int})
    assert (answered["name"] == [classes[k] for k in answered["class"]]).all()
    assert summary["new"]["error_rate"] == pytest.approx((answered["class"] != answered["label"]).mean())
    assert summary["new"]["error_rate"] < 0.5  # a trained model on its own kind of images


def test_predict_compares_a_version_with_any_mlflow_classifier(text_versions, capsys, tmp_path):
    """`--compare models:/NAME@ALIAS` of a scikit-learn pipeline registered with `mlflow.sklearn`
    (trained on other tweets, never by Congruent): its answers, class names, are matched to the
    version's classes by name on Ray Data, and the pair's NFR is the one counted by hand from the
    pipeline's own answers and the version's prediction files."""
    import pandas as pd

    from test_flip_evaluator import pipeline
    from workers.data.text_tables import load_tweet_sentiment

    model, folder = text_versions
    tweets = load_tweet_sentiment()
    rows = np.arange(6, len(tweets.texts), 12)[:3000]  # beside the shards' (every 12th from 0)
    names = np.asarray(tweets.classes)[np.asarray(tweets.labels)[rows]]
    trained = pipeline("word", 1.0).fit(pd.DataFrame({"text": [tweets.texts[i] for i in rows]}), names)
    foreign = f"sk-{tmp_path.name}"[-60:]
    with mlflow.start_run():
        mlflow.sklearn.log_model(trained, name="model", registered_model_name=foreign)
    mlflow.MlflowClient().set_registered_model_alias(foreign, "champion", "1")
    out = tmp_path / "out"
    code, stdout, err = cli(
        capsys,
        "predict",
        f"{model}/2",
        str(folder),
        "--out",
        str(out),
        "--compare",
        f"models:/{foreign}@champion",
        "--json",
    )
    assert code == 0, err
    summary = json.loads(stdout)
    assert summary["versions"]["old"] == f"{foreign}/1"  # the alias resolved: what was scored is recorded
    assert summary["old"]["rows"] == 3000 and summary["old"]["failed"] == 0

    new = read_predictions(out / f"{model}-v2")
    texts = pd.concat([pd.read_parquet(f) for f in sorted(folder.glob("*.parquet"))])
    by_text = dict(zip(texts["text"], trained.predict(texts)))  # by hand, the pipeline's own answers
    shard_ids = key_ids([t.strip() for t in texts["text"]])
    old_names = np.array([by_text[t] for t in texts["text"]])
    classes = read_checkpoint(registry.checkpoint_of(VersionRef(model, "2")))["classes"]
    old_ids = np.array([classes.index(n) for n in old_names])
    order = {int(i): k for k, i in enumerate(shard_ids)}
    aligned = old_ids[[order[int(i)] for i in new["ids"]]]
    labels, new_ids = new["labels"], new["class_ids"]
    negative = np.count_nonzero((aligned == labels) & (new_ids != labels))
    assert negative > 10  # the test means something
    assert summary["pair"]["nfr"] == pytest.approx(negative / 3000)
    assert summary["pair"]["disagreement"] == pytest.approx(np.count_nonzero(aligned != new_ids) / 3000)
    old = read_predictions(out / f"mlflow-{foreign}-1")
    assert np.array_equal(old["class_ids"], aligned) and np.array_equal(old["ids"], new["ids"])

    code, _, err = cli(
        capsys,
        "predict",
        f"{model}/2",
        str(folder),
        "--out",
        str(tmp_path / "x"),
        "--compare",
        "runs:/0123456789abcdef0123456789abcdef/model",
    )
    assert code == 2 and "MLflow finds no model there" in err and len(err.strip().splitlines()) == 1, err
