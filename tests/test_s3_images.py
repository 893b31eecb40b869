"""An ImageFolder tree on S3 (`data.path: s3://bucket/photos/` with `data.modality: image`), against a
SeaweedFS on 127.0.0.1: listed (not read) by preflight, its splits, labels and pixels those of a
local copy of the tree, read by Ray Data's tasks with the driver's credentials; a corrupt object
fails the reading with its key (issue 33)."""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from conftest import SPEC_RESOURCES
from servers import s3_environment
from workers.errors import DataError

BUCKET = "photos"


@pytest.fixture(scope="module")
def s3_tree(tmp_path_factory, fashion_mnist, mlflow_stack):
    """300 Fashion-MNIST PNGs as an ImageFolder tree, locally and under s3://photos/fm/ of the shared
    S3 (plus a stray file at the prefix's top, which belongs to no class); s3://photos/broken/ holds
    two classes of 41 images, one cut short where preflight's decoded sample does not look (the 5th
    of 41). Yields the local root and the S3 environment."""
    env = mlflow_stack.data_bucket(BUCKET)
    root = tmp_path_factory.mktemp("tree")
    images, labels = fashion_mnist.train.images[:300], fashion_mnist.train.labels[:300]
    for i, (image, label) in enumerate(zip(images, labels)):
        folder = root / fashion_mnist.train.classes[int(label)].replace("/", "-")
        folder.mkdir(exist_ok=True)
        Image.fromarray(image[0].numpy()).save(folder / f"{i:05d}.png")
    client = mlflow_stack.s3_client()
    for path in sorted(root.rglob("*.png")):
        client.upload_file(str(path), BUCKET, f"fm/{path.relative_to(root)}")
    whole = next(iter(sorted(root.rglob("*.png")))).read_bytes()
    client.put_object(Bucket=BUCKET, Key="fm/cover.png", Body=whole)  # in no class folder: not a sample
    for i in range(40):
        body, name = (whole[: len(whole) // 2], "004-cut") if i == 4 else (whole, f"{i:03d}")
        client.put_object(Bucket=BUCKET, Key=f"broken/a/{name}.png", Body=body)
    client.put_object(Bucket=BUCKET, Key="broken/b/good.png", Body=whole)
    yield root, env


@pytest.fixture
def s3_env(s3_tree, monkeypatch):
    root, env = s3_tree
    with s3_environment(monkeypatch, env):
        yield root


def test_an_image_tree_on_s3_is_the_local_trees_splits_and_pixels(ray_cluster, s3_env):
    """Listed, not read: the same classes, files and labels per split as the local tree, a
    fingerprint over the ETags; the eval split's pixels, read by Ray Data's tasks on the cluster
    (started without the S3 environment), equal the local stream's; a training epoch sees every
    train sample."""
    from orchestrator.dataplane.image_streams import open_image_stream

    local = open_image_stream(str(s3_env))
    remote = open_image_stream(f"s3://{BUCKET}/fm/")
    assert remote.train.classes == local.train.classes and remote.eval.in_channels == 1
    for left, right in ((remote.train, local.train), (remote.val, local.val), (remote.eval, local.eval)):
        assert left.files == right.files and torch.equal(left.labels, right.labels)
    assert remote.fingerprint != local.fingerprint  # over the objects' ETags, not the local bytes
    read, expected = list(remote.eval.chunks(64)), list(local.eval.chunks(64))
    assert [b.indices.tolist() for b in read] == [b.indices.tolist() for b in expected]  # sample ids, in order
    assert torch.equal(torch.cat([b.values for b in read]), torch.cat([b.values for b in expected]))
    assert sum(len(b) for b in remote.train.epoch(32, seed=0, epoch=1)) == len(local.train)


def test_a_corrupt_object_fails_the_reading_with_its_key(ray_cluster, s3_env):
    from orchestrator.dataplane.image_streams import open_image_stream

    splits = open_image_stream(f"s3://{BUCKET}/broken", val_fraction=0.2, eval_fraction=0.2)  # listed only
    with pytest.raises(DataError, match=rf"s3://{BUCKET}/broken/a/004-cut.png: cannot read image"):
        for split in (splits.train, splits.val, splits.eval):
            list(split.chunks(8))
    with pytest.raises(DataError, match="data.skip_corrupt needs every image read before training"):
        open_image_stream(f"s3://{BUCKET}/broken", skip_corrupt=True)


def test_a_spec_on_an_s3_image_tree_checks_without_reading_it_whole(s3_env, tmp_path):
    from orchestrator.driver.check import check_specs

    spec = tmp_path / "spec.yaml"
    head = f"model: s3-photos\nversion: v1\narch: small-cnn\nstorage: {tmp_path / 'runs'}\n"
    spec.write_text(head + f"data: {{path: 's3://{BUCKET}/fm/', modality: image}}\n")
    (checked,) = check_specs([str(spec)])
    assert checked.problems == [] and "image samples, 10 classes" in checked.summary, checked
    spec.write_text(head + f"data: {{path: 's3://{BUCKET}/fm/', modality: image, skip_corrupt: true}}\n")
    (checked,) = check_specs([str(spec)])
    assert any("data.skip_corrupt needs every image read before training" in p for p in checked.problems), checked
    spec.write_text(head + f"data: {{path: 's3://{BUCKET}/fm/*.parquet', modality: image}}\n")
    (checked,) = check_specs([str(spec)])
    assert any("is text, not image" in p for p in checked.problems), checked.problems


def test_an_update_on_an_s3_image_tree_registers_with_its_nfr(ray_cluster, s3_tree, tmp_path):
    """`congruent run --ray-address` on the tree in S3: v1, then v2 with ELODI m 2 whose teachers
    are a pool of 2 actors taking the student's streamed, augmented batches; the cluster's workers
    were started without the S3 environment. Both register on one eval split, v2 with parent 1 and
    every teacher batch delivered once."""
    import json
    import os

    from mlflow import MlflowClient

    from conftest import cli_runs

    _, env = s3_tree
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    environment = {**os.environ, **env, "MLFLOW_TRACKING_URI": uri, "MLFLOW_REGISTRY_URI": uri}
    common = {
        "model": "s3-photos",
        "arch": "small-cnn",
        "storage": str(tmp_path / "storage"),
        "data": {"path": f"s3://{BUCKET}/fm/", "modality": "image"},
        "train": {"epochs": 1, "batch_size": 32},
    }
    pooled = SPEC_RESOURCES  # a pool of two actors
    plain = {
        "method": {"name": "none"},
        "resources": {"replica": {"cpus": 1}, "student": {"cpus": 1}, "fresh_stage_workers": False},
    }
    elodi = {"old": "s3-photos/1", "method": {"name": "elodi", "m": 2, "k": 3}, "resources": pooled}
    documents = {"v1": {**common, "version": "v1", **plain}, "v2": {**common, "version": "v2", **elodi}}
    results = cli_runs(documents, tmp_path, ray_cluster.address, environment)
    assert [results[v]["registered_version"] for v in ("v1", "v2")] == ["1", "2"]
    versions = MlflowClient(tracking_uri=uri, registry_uri=uri).search_model_versions("name='s3-photos'")
    tags = {str(mv.version): mv.tags for mv in versions}
    assert tags["1"]["fingerprint"] == tags["2"]["fingerprint"] and tags["2"]["parent_version"] == "1"
    record = json.loads((tmp_path / "v2" / "result.json").read_text())
    served = record["student"]["teacher_batches"]
    assert served["requested"] == served["delivered"] == served["distinct"] > 0 and served["duplicates"] == 0
    assert 0 <= float(tags["2"]["nfr"]) <= 1 and results["v2"]["vs_old"]["n"] == record["n_eval"] > 30
