"""Text-table shards on S3 (`data.path: s3://bucket/prefix/*.parquet`), against a SeaweedFS on
127.0.0.1: listed with the storage's credentials, scanned by preflight and read by Ray Data's tasks
as the same splits a local copy of the shards gives; a bucket or credentials that do not work are
one line (issue 33)."""

from __future__ import annotations

import pytest
import torch

from servers import s3_environment
from workers import s3_store
from workers.errors import DataError

BUCKET = "datasets"


@pytest.fixture(scope="module")
def s3_shards(tweet_shards, mlflow_stack):
    """The tweet shards under s3://datasets/tweets/ of the shared S3, and its environment."""
    env = mlflow_stack.data_bucket(BUCKET)
    folder, _ = tweet_shards
    client = mlflow_stack.s3_client()
    for part in sorted(folder.glob("*.parquet")):
        client.upload_file(str(part), BUCKET, f"tweets/{part.name}")
    client.put_object(Bucket=BUCKET, Key="tweets/README.txt", Body=b"not a shard")
    return folder, env


@pytest.fixture
def s3_env(s3_shards, monkeypatch):
    folder, env = s3_shards
    with s3_environment(monkeypatch, env):
        yield folder


def test_shards_on_s3_open_as_the_same_splits_as_a_local_copy(s3_env):
    from orchestrator.dataplane.table_streams import open_table_stream

    local = open_table_stream(str(s3_env / "*.parquet"), label_column="sentiment")
    for pattern in (f"s3://{BUCKET}/tweets/*.parquet", f"s3://{BUCKET}/tweets/"):
        remote = open_table_stream(pattern, label_column="sentiment")
        assert remote.train.shards.files == tuple(f"s3://{BUCKET}/tweets/part-{i}.parquet" for i in range(3))
        assert remote.train.classes == local.train.classes
        for left, right in ((remote.train, local.train), (remote.val, local.val), (remote.eval, local.eval)):
            assert left.labels.tolist() == right.labels.tolist()
        assert remote.fingerprint != local.fingerprint  # over the objects' ETags, not the local files


def test_a_bucket_root_a_prefix_a_key_and_a_glob_list_their_shards(s3_env):
    from workers.storage import listing

    shards = [f"s3://{BUCKET}/tweets/part-{i}.parquet" for i in range(3)]
    for pattern in (f"s3://{BUCKET}", f"s3://{BUCKET}/", f"s3://{BUCKET}/tweets", f"s3://{BUCKET}/tw*.parquet"):
        assert [entry.uri for entry in listing(pattern, (".parquet",))] == shards, pattern
    assert [entry.uri for entry in listing(shards[1], (".parquet",))] == shards[1:2]
    assert listing(f"s3://{BUCKET}/tweet", (".parquet",)) == []  # a prefix is a folder, not a name's start


def test_a_bucket_or_credentials_that_do_not_work_are_one_line(s3_env, monkeypatch):
    from orchestrator.dataplane.table_streams import open_table_stream

    cases = [
        ("s3://no-such-bucket/tweets/*.parquet", "no such bucket"),
        (f"s3://{BUCKET}/nothing-here/", "no .csv, .tsv, .jsonl, .parquet shards there"),
    ]
    for pattern, expected in cases:
        with pytest.raises(DataError) as caught:
            open_table_stream(pattern, label_column="sentiment")
        assert str(caught.value).startswith(pattern) and expected in str(caught.value), str(caught.value)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    s3_store.client.cache_clear()
    with pytest.raises(DataError, match="access denied"):
        open_table_stream(f"s3://{BUCKET}/tweets/*.parquet", label_column="sentiment")
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(key)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    with pytest.raises(DataError, match="no AWS credentials"):
        open_table_stream(f"s3://{BUCKET}/tweets/*.parquet", label_column="sentiment")


def test_ray_data_reads_the_shards_from_s3_with_the_drivers_credentials(ray_cluster, s3_env):
    """The reading tasks run on the test cluster, whose workers were started without the S3
    environment: they get it from the driver with the stream (`reader_env`)."""
    from orchestrator.dataplane.table_streams import open_table_stream
    from workers.data.tokenizer import text_input

    remote = open_table_stream(f"s3://{BUCKET}/tweets/*.parquet", label_column="sentiment")
    local = open_table_stream(str(s3_env / "*.parquet"), label_column="sentiment")
    inputs = text_input(local.train.tokenizer_texts(2000), vocab_size=500, max_length=32)
    read = list(remote.eval.chunks(128, inputs))
    expected = list(local.eval.chunks(128, inputs))
    assert [b.indices.tolist() for b in read] == [b.indices.tolist() for b in expected]  # sample ids, in order
    assert all(torch.equal(b.values, e.values) and torch.equal(b.labels, e.labels) for b, e in zip(read, expected))
    trained = list(remote.train.epoch(64, seed=0, epoch=1, inputs=inputs))
    assert sum(len(b) for b in trained) == len(local.train)


def test_a_spec_on_s3_shards_checks_without_reading_them_whole(s3_env, tmp_path):
    from orchestrator.driver.check import check_specs

    spec = tmp_path / "spec.yaml"
    head = f"model: s3-tweets\nversion: v1\narch: text-linear\nstorage: {tmp_path / 'runs'}\n"
    spec.write_text(head + f"data: {{path: 's3://{BUCKET}/tweets/', label_column: sentiment}}\n")
    (checked,) = check_specs([str(spec)])
    assert checked.problems == [] and "text samples, 3 classes" in checked.summary, checked
    spec.write_text(head + f"data: {{path: 's3://{BUCKET}/tweets/', label_column: sentiment, streaming: false}}\n")
    (checked,) = check_specs([str(spec)])
    assert any("an s3:// source, is only read as a stream" in line for line in checked.problems), checked.problems


def test_an_update_on_s3_shards_registers_with_its_nfr_chain(ray_cluster, s3_shards, tmp_path):
    """`congruent run --ray-address` on shards in S3 (v1, then v2 with ELODI m 2 against it): the
    stage tasks, on a cluster whose workers were started without the S3 environment, read the
    shards with the driver's AWS_* variables (its runtime_env); both versions register on one eval
    split, v2 with its NFR against v1 equal to `congruent compare` on their predictions."""
    import os

    import numpy as np
    from mlflow import MlflowClient

    from conftest import cli_runs
    from orchestrator.driver.compare import compare_predictions

    _, env = s3_shards
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    environment = {**os.environ, **env, "MLFLOW_TRACKING_URI": uri, "MLFLOW_REGISTRY_URI": uri}
    common = {
        "model": "s3-tweets",
        "arch": "text-linear",
        "storage": str(tmp_path / "storage"),
        "data": {"path": f"s3://{BUCKET}/tweets/*.parquet", "label_column": "sentiment"},
        "train": {"epochs": 1, "batch_size": 64},
        "tokenizer": {"vocab_size": 1500, "max_length": 40},
        "resources": {"replica": {"cpus": 1}, "student": {"cpus": 1}, "fresh_stage_workers": False},
    }
    documents = {
        "v1": {**common, "version": "v1", "method": {"name": "none"}},
        "v2": {**common, "version": "v2", "old": "s3-tweets/1", "method": {"name": "elodi", "m": 2, "k": 3}},
    }
    results = cli_runs(documents, tmp_path, ray_cluster.address, environment)
    assert [results[v]["registered_version"] for v in ("v1", "v2")] == ["1", "2"]
    versions = MlflowClient(tracking_uri=uri, registry_uri=uri).search_model_versions("name='s3-tweets'")
    tags = {str(mv.version): mv.tags for mv in versions}
    assert tags["1"]["fingerprint"] == tags["2"]["fingerprint"] and tags["2"]["parent_version"] == "1"
    folder = tmp_path / "v2" / "predictions"
    expected = compare_predictions(
        np.load(folder / "labels.npy"), [np.load(folder / f"{n}.npy") for n in ("old", "new")]
    )
    assert float(tags["2"]["nfr"]) == pytest.approx(expected["pairs"][0]["nfr"], abs=1e-6)
    assert results["v2"]["vs_paragon"]["n"] == expected["n"] > 100 and results["v2"]["vs_old"]["n"] == expected["n"]
