"""Real update pipelines on a real two-node Ray cluster (127.0.0.1), on a Fashion-MNIST slice."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import yaml

from orchestrator.run import run_update
from pipelines.spec import parse_spec
from workers.checkpoints import ModelSettings, save_checkpoint
from workers.trainer import TrainConfig, train

DATA = {"train_limit": 3000, "eval_limit": 1000}
TRAIN = {"epochs": 1, "batch_size": 128, "lr": 0.05, "seed": 0}
RESOURCES = {"replica": {"cpus": 1}, "student": {"cpus": 1}, "teacher": {"cpus": 0.5}, "teacher_actors": 2}


@pytest.fixture(scope="module")
def old_checkpoints(fashion_mnist, tmp_path_factory):
    """Two real old models, trained here on 2,000 images: an MLP and a small CNN."""
    folder = tmp_path_factory.mktemp("old")
    paths = {}
    for arch in ("mlp-small", "small-cnn"):
        settings = ModelSettings(arch, 10)
        model = settings.build(seed=7)
        train(model, fashion_mnist.train.take(slice(0, 2000)), TrainConfig(epochs=1, lr=0.05, seed=7))
        paths[arch] = str(save_checkpoint(folder / f"{arch}.pt", model, settings))
    return paths


def spec_document(tmp_path, **fields):
    return {"model": "fmnist", "version": "v2", "data": DATA, "train": TRAIN, "resources": RESOURCES,
            "storage": str(tmp_path / "storage"), **fields}


@pytest.mark.slow
def test_elodi_pipeline_end_to_end_on_two_nodes(ray_cluster, old_checkpoints, tmp_path):
    document = spec_document(
        tmp_path, version="v2-elodi", arch="small-cnn", old=old_checkpoints["mlp-small"],
        method={"name": "elodi", "m": 2, "alpha": 0.8, "k": 3, "legacy_weight": 0.5},
    )
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(document))
    env = {**os.environ, "RAY_ADDRESS": ""}
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", "run", str(tmp_path / "spec.yaml"), "--address", ray_cluster.address,
         "--out", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=600, env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "out" / "result.json").read_text())

    # the replicas ran in separate worker processes, one on each node, not in the driver
    replicas = result["replicas"]
    assert len(replicas) == 2 and len({r["pid"] for r in replicas}) == 2
    assert len({r["node_id"] for r in replicas}) == 2
    # the teacher pool served every distillation step: one batch per step, from both actors
    pool = result["teacher_pool"]
    assert pool["actors"] == 2 and len(set(pool["pids"])) == 2
    assert pool["batches_served"] == pool["student_steps"] == result["student"]["steps"] == 24

    # the printed metrics are `congruent compare` on the saved predictions
    out = done.stdout
    preds = result["predictions"]
    compared = {}
    for old_name in ("old", "paragon"):
        done_compare = subprocess.run(
            [sys.executable, "-m", "orchestrator", "compare", "--labels", result["labels"], preds[old_name],
             preds["new"], "--json"], capture_output=True, text=True, timeout=120)
        compared[old_name] = json.loads(done_compare.stdout)["pairs"][0]
    for old_name, key in (("old", "vs_old"), ("paragon", "vs_paragon")):
        metrics = result["metrics"][key]
        assert compared[old_name]["nfr"] == pytest.approx(metrics["nfr"], abs=0)
        assert compared[old_name]["pfr"] == pytest.approx(metrics["pfr"], abs=0)
        row = next(line for line in out.splitlines() if line.strip().startswith(f"new vs {old_name}"))
        assert f"{100 * compared[old_name]['nfr']:.2f}%" in row and f"{100 * compared[old_name]['pfr']:.2f}%" in row
    assert np.load(preds["new"]).shape == (1000, 10)


@pytest.mark.slow
@pytest.mark.parametrize("method,arch,old", [
    ("none", "mlp-small", None), ("fd-lm", "mlp-small", "mlp-small"),
    ("bcwi", "small-cnn", "small-cnn"), ("ensemble", "mlp-small", None),
])
def test_baselines_through_the_same_pipeline(ray_cluster, old_checkpoints, tmp_path, method, arch, old):
    document = spec_document(tmp_path, version=f"v2-{method}", arch=arch, method={"name": method, "m": 2},
                             old=old_checkpoints[old] if old else None)
    spec = parse_spec(document)
    result = run_update(spec, tmp_path / "out")
    metrics = result["metrics"]
    assert 0 < metrics["error_rate"] < 0.9
    if old:
        assert set(metrics["vs_old"]) >= {"nfr", "pfr", "rel_nfr", "er_old", "er_new"}
    if method == "ensemble":
        assert result["checkpoint"] is None and len(result["replicas"]) == 2
        assert result["teacher_pool"]["batches_served"] == 0  # the paragon needs no student
    if method == "bcwi":
        sweep = result["bcwi"]["sweep"]
        assert [row["alpha"] for row in sweep] == [i / 10 for i in range(11)]
        assert result["checkpoint"].endswith("model-bcwi.pt")
        picked = next(row for row in sweep if row["alpha"] == result["bcwi"]["alpha"])
        assert picked["error_rate"] <= sweep[0]["error_rate"] + spec.method.bcwi_er_tolerance
    if method == "fd-lm":
        assert result["teacher_pool"]["batches_served"] == result["student"]["steps"]
