"""Every version in MLflow: tracked runs, registry versions with lineage and flips, the ledger,
the pairwise NFR chain and the promotion gate — on the embedded store and on a real MLflow server
(PostgreSQL backend, artifacts in SeaweedFS S3)."""

import json
import os
import subprocess
import sys

import mlflow
import numpy as np
import pandas as pd
import pytest
import yaml
from mlflow import MlflowClient

from conftest import SPEC_DATA, SPEC_RESOURCES, SPEC_TRAIN
from orchestrator.cli import main
from orchestrator.tracking.registry import VersionRef, ledger_of
from test_serving import png


@pytest.fixture
def run_spec(spec_file, tmp_path, capsys):
    """`run_spec(name, **fields)`: `congruent run` of a spec file, in this process."""

    def run(name, **fields):
        code = main(["run", str(spec_file(name, **fields)), "--out", str(tmp_path / name)])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


def versions_json(capsys, model, matrix=False):
    assert main(["versions", model, "--json", *(["--matrix"] if matrix else [])]) == 0
    return json.loads(capsys.readouterr().out)


def test_tracked_run_registered_version_and_failed_run(ray_cluster, run_spec, tmp_path, capsys):
    code, out, err = run_spec(
        "v1",
        model="tracked",
        version="v1",
        arch="mlp-small",
        method={"name": "none"},
        train={**SPEC_TRAIN, "augment": True},  # mlp-small's own default is off
    )
    assert code == 0, err
    assert "Created version" not in err and "registered model" not in err.lower()  # MLflow's own prints muted
    client = MlflowClient()
    experiment = client.get_experiment_by_name("tracked")
    parent = client.search_runs([experiment.experiment_id], "tags.mlflow.runName = 'v1'")[0]
    assert parent.info.status == "FINISHED"
    assert parent.data.params["method.name"] == "none" and parent.data.params["train.lr"] == "0.05"
    # the augmentation applied, `flip: auto` resolved: Fashion-MNIST keeps its classes when mirrored
    assert (parent.data.params["augment.crop"], parent.data.params["augment.flip"]) == ("2", "true")
    for tag in ("spec_hash", "code_version", "fingerprint", "system.torch", "system.ray"):
        assert parent.data.tags[tag]
    children = client.search_runs([experiment.experiment_id], f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    assert {c.info.run_name for c in children} == {"training", "evaluation"}
    training = next(c for c in children if c.info.run_name == "training")
    assert [m.step for m in client.get_metric_history(training.info.run_id, "loss")] == [1]
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"checkpoint", "ledger", "nfr_matrix.json", "nfr_matrix.png", "spec.yaml"} <= artifacts

    version = client.get_model_version("tracked", "1")
    assert version.tags["method"] == "none" and version.tags["fingerprint"] == parent.data.tags["fingerprint"]
    assert not {"parent_version", "old", "nfr", "pfr", "rel_nfr"} & set(version.tags)  # absent, not ""
    assert parent.data.metrics["error_rate"] == pytest.approx(float(version.tags["error_rate"]), abs=1e-6)
    assert str(client.get_model_version_by_alias("tracked", "challenger").version) == "1"
    ledger = ledger_of(VersionRef("tracked", "1"))
    assert ledger["class_ids"].shape == (800,) and ledger["topk_values"].shape == (800, 5)
    result = json.loads((tmp_path / "v1" / "result.json").read_text())
    assert np.array_equal(ledger["class_ids"], np.load(result["predictions"]["new"]).argmax(axis=1))
    served = mlflow.pyfunc.load_model("models:/tracked/1")  # what any MLflow tool loads: raw images in
    blank = png(np.zeros((28, 28), np.uint8))
    assert served.predict(pd.DataFrame({"image": [blank, blank]}))["class"].between(0, 9).all()

    # a pipeline that diverges: its run is FAILED, no version appears, exit 1 with one line
    code, out, err = run_spec(
        "bad",
        model="tracked",
        version="v2",
        arch="mlp-small",
        method={"name": "none"},
        train={**SPEC_TRAIN, "lr": 1e12, "max_grad_norm": None},
    )
    assert code == 1 and "NonFiniteLossError" in err and len(err.strip().splitlines()) == 1
    failed = client.search_runs([experiment.experiment_id], "tags.mlflow.runName = 'v2'")[0]
    assert failed.info.status == "FAILED"
    assert [v["version"] for v in versions_json(capsys, "tracked")["versions"]] == ["1"]


@pytest.fixture(scope="module")
def chain_v1_in_s3(ray_cluster, mlflow_stack, tmp_path_factory):
    """v1 of `chain` on the real MLflow server, run once for the module by a driver process of its own
    (`congruent run --ray-address`): ELODI m 2 (replicas, teacher actors and the student), its
    checkpoints in s3://checkpoints/runs, promoted to champion. The root of the version chain and the
    run whose checkpoints are looked for in S3. Returns its --out folder and the finished driver."""
    folder = tmp_path_factory.mktemp("chain-v1")
    mlflow_stack.s3_client().create_bucket(Bucket="checkpoints")
    document = {
        "model": "chain",
        "version": "v1",
        "arch": "mlp-small",
        "method": {"name": "elodi", "m": 2},
        "data": SPEC_DATA,
        "train": SPEC_TRAIN,
        "resources": SPEC_RESOURCES,
        "storage": "s3://checkpoints/runs",
        "promote": {"max_nfr": 1.0},
    }
    spec = folder / "v1.yaml"
    spec.write_text(yaml.safe_dump(document))
    env = {**os.environ, **mlflow_stack.env, "RAY_ADDRESS": ""}
    done = subprocess.run(  # a driver process of its own: its workers get the S3 settings of its environment
        [
            sys.executable,
            "-m",
            "orchestrator",
            "run",
            str(spec),
            "--ray-address",
            ray_cluster.address,
            "--out",
            str(folder / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    return folder / "out", done


def test_version_chain_on_a_real_mlflow_server(
    ray_cluster, mlflow_stack, chain_v1_in_s3, run_spec, tmp_path, capsys, monkeypatch
):
    for key, value in mlflow_stack.env.items():
        monkeypatch.setenv(key, value)
    model = "chain"
    _, v1 = chain_v1_in_s3  # mlp-small, ELODI m 2, promoted: the champion v2 starts from
    assert v1.returncode == 0, v1.stderr[-3000:]
    steps = [
        (
            "v2",
            {
                "arch": "small-cnn",
                "method": {"name": "fd-lm"},
                "old": f"{model}@champion",
                "promote": {"max_nfr": 1.0, "max_er_increase": 1.0},
            },
        ),
        ("v3", {"arch": "mlp", "method": {"name": "kd"}, "old": f"{model}@champion"}),
    ]
    for version, fields in steps:
        code, out, err = run_spec(version, model=model, version=version, **fields)
        assert code == 0, err
    chain = versions_json(capsys, model, matrix=True)
    assert [v["version"] for v in chain["versions"]] == ["1", "2", "3"]
    assert [v["parent_version"] for v in chain["versions"]] == [None, "1", "2"]
    assert [v["arch"] for v in chain["versions"]] == ["mlp-small", "small-cnn", "mlp"]
    assert "champion" in chain["versions"][1]["aliases"] and "challenger" in chain["versions"][2]["aliases"]
    v2 = MlflowClient().get_model_version(model, "2")
    assert v2.tags["old"] == f"{model}@champion"  # as the spec said it, not a temporary copy's path
    v2_run = MlflowClient().get_run(v2.run_id)  # the pipeline's run carries its flips: the UI sorts by them
    assert v2_run.data.metrics["vs_old.nfr"] == pytest.approx(float(chain["versions"][1]["nfr"]), abs=1e-6)

    # the registry's matrix is `congruent compare` on the ledger's predictions
    files = []
    for v in ("1", "2", "3"):
        ledger = ledger_of(VersionRef(model, v))
        files.append(tmp_path / f"ledger-{v}.npy")
        np.save(files[-1], ledger["class_ids"])
    np.save(tmp_path / "labels.npy", ledger["labels"])
    assert main(["compare", "--labels", str(tmp_path / "labels.npy"), *map(str, files), "--json"]) == 0
    compared = json.loads(capsys.readouterr().out)
    assert chain["matrix"]["nfr_matrix"] == compared["nfr_matrix"]
    assert float(chain["versions"][2]["nfr"]) == pytest.approx(compared["nfr_matrix"][1][2], abs=1e-6)

    # the artifacts really are in the S3 bucket, and the runs in PostgreSQL
    pages = mlflow_stack.s3_client().get_paginator("list_objects_v2").paginate(Bucket=mlflow_stack.bucket)
    keys = [o["Key"] for page in pages for o in page.get("Contents", [])]
    for v in ("1", "2", "3"):  # the stack is shared by the session: look for these versions' runs
        run_id = MlflowClient().get_model_version(model, v).run_id
        assert any(f"{run_id}/artifacts/ledger/predictions.parquet" in key for key in keys), v

    # the promotion gate: v3 against champion v2
    nfr_v3 = compared["nfr_matrix"][1][2]
    assert main(["promote", model, "3", "--max-nfr", str(nfr_v3 / 2), "--max-er-increase", "1"]) == 1
    assert "NOT promoted" in capsys.readouterr().err
    assert str(MlflowClient().get_model_version_by_alias(model, "champion").version) == "2"
    assert main(["promote", model, "3", "--max-nfr", str(nfr_v3 + 0.001), "--max-er-increase", "1"]) == 0
    assert str(MlflowClient().get_model_version_by_alias(model, "champion").version) == "3"


def test_checkpoints_in_s3_storage_on_the_cluster(mlflow_stack, chain_v1_in_s3):
    """Replicas, teacher actors and the student read and write their checkpoints in S3; the
    workers get the endpoint and credentials from the driver's environment, not from the spec
    (`chain_v1_in_s3`: a driver process of its own, ELODI m 2, storage s3://checkpoints/runs)."""
    out, done = chain_v1_in_s3
    assert done.returncode == 0, done.stderr[-3000:]
    s3 = mlflow_stack.s3_client()
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket="checkpoints")["Contents"]}
    assert sum(k.endswith(("replica-0.pt", "replica-1.pt")) for k in keys) == 2
    assert any(k.endswith("/model.pt") and "/v1/" in k for k in keys)
    result = json.loads((out / "result.json").read_text())
    assert result["checkpoint"].startswith("s3://checkpoints/runs/chain/v1/")
    assert mlflow_stack.secret_key not in (out / "result.json").read_text()
    client = MlflowClient(tracking_uri=mlflow_stack.tracking_uri, registry_uri=mlflow_stack.tracking_uri)
    experiment = client.get_experiment_by_name("chain").experiment_id
    run = client.search_runs([experiment], "tags.mlflow.runName = 'v1'")[0]
    logged = json.dumps({**run.data.params, **run.data.tags})
    assert "s3://checkpoints/runs" in logged and mlflow_stack.secret_key not in logged
    assert mlflow_stack.access_key not in logged


def test_data_growth_with_new_classes_counts_flips_on_the_classes_the_old_version_knows(
    ray_cluster, run_spec, tmp_path, capsys
):
    code, _, err = run_spec("grow-v1", model="grown", version="v1", data={**SPEC_DATA, "subset": "half-classes"})
    assert code == 0, err
    code, _, err = run_spec("grow-v2", model="grown", version="v2", old="grown/1")
    assert code == 0, err
    result = json.loads((tmp_path / "grow-v2" / "result.json").read_text())
    labels = np.load(result["labels"])
    old, new = (np.load(result["predictions"][k]).argmax(1) for k in ("old", "new"))
    known = labels < 5  # half-classes: v1 was trained on classes 0–4 only
    expected = np.count_nonzero((old == labels) & (new != labels) & known) / np.count_nonzero(known)
    vs_old = result["metrics"]["vs_old"]
    assert vs_old["n"] == np.count_nonzero(known) < len(labels) and vs_old["nfr"] == pytest.approx(expected)
    everything = np.count_nonzero((old == labels) & (new != labels)) / len(labels)
    assert result["metrics"]["vs_old_all_classes"]["nfr"] == pytest.approx(everything)
    tags = MlflowClient().get_model_version("grown", "2").tags
    assert tags["nfr"] == f"{expected:.6f}" and tags["nfr_classes"] == "0,1,2,3,4"
    chain = versions_json(capsys, "grown", matrix=True)
    assert chain["matrix"]["nfr_matrix"][0][1] == pytest.approx(expected)  # row v1 counts v1's classes
    assert ledger_of(VersionRef("grown", "1"))["known_classes"].tolist() == [0, 1, 2, 3, 4]
