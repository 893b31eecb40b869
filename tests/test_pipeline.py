"""Real update pipelines on a real two-node Ray cluster (127.0.0.1), on a Fashion-MNIST slice."""

import json

import numpy as np
import pytest

from conftest import SPEC_RESOURCES, SPEC_TRAIN, run_update
from orchestrator.cli import main
from pipelines.spec import parse_spec
from workers.models.checkpoints import ModelSettings, save_checkpoint
from workers.training.config import TrainConfig
from workers.training.trainer import train

DATA = {"train_limit": 3000, "eval_limit": 1000}


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


def _alive(pid: int) -> bool:
    """Whether process `pid` still exists (waits up to 10 s for it to exit)."""
    import os
    import time

    for _ in range(20):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        time.sleep(0.5)
    return True


def test_elodi_pipeline_end_to_end_on_two_nodes(ray_cluster, old_checkpoints, spec_file, tmp_path, capsys):
    spec = spec_file(
        "elodi",
        version="v2-elodi",
        arch="small-cnn",
        old=old_checkpoints["mlp-small"],
        data=DATA,
        method={"name": "elodi", "m": 2, "alpha": 0.8, "k": 3, "legacy_weight": 0.5},
        resources={**SPEC_RESOURCES, "fresh_stage_workers": True},  # the default, checked below
    )
    code = main(["run", str(spec), "--ray-address", ray_cluster.address, "--out", str(tmp_path / "out")])
    out, err = capsys.readouterr()
    assert code == 0, err[-3000:]
    result = json.loads((tmp_path / "out" / "result.json").read_text())

    # the replicas ran in separate worker processes, one on each node, not in the driver
    replicas = result["replicas"]
    assert len(replicas) == 2 and len({r["pid"] for r in replicas}) == 2
    assert len({r["node_id"] for r in replicas}) == 2
    # each stage's worker process exited with its stage (both nodes are this machine's processes):
    # no finished stage's memory stays with an idle worker beside the next one
    assert [pid for pid in [*(r["pid"] for r in replicas), result["student"]["pid"]] if _alive(pid)] == []
    # the teacher pool served every distillation step: one batch per step, from both actors
    pool = result["teacher_pool"]
    assert pool["actors"] == 2 and len(set(pool["pids"])) == 2
    assert pool["batches_served"] == pool["student_steps"] == result["student"]["steps"] == 24
    # the actors hold the training split: a step's request is its indices and augmentation draws
    assert result["student"]["teacher_batches"]["bytes_per_request"] < 128 * 8  # an image batch: 128 × 3 KB

    # the printed metrics are `congruent compare` on the saved predictions
    preds = result["predictions"]
    for old_name, key in (("old", "vs_old"), ("paragon", "vs_paragon")):
        assert main(["compare", "--labels", result["labels"], preds[old_name], preds["new"], "--json"]) == 0
        compared = json.loads(capsys.readouterr().out)["pairs"][0]
        metrics = result["metrics"][key]
        assert compared["nfr"] == metrics["nfr"] and compared["pfr"] == metrics["pfr"]
        row = next(line for line in out.splitlines() if line.strip().startswith(f"new vs {old_name}"))
        assert f"{100 * compared['nfr']:.2f}%" in row and f"{100 * compared['pfr']:.2f}%" in row
    assert np.load(preds["new"]).shape == (1000, 10)


def test_stage_tasks_run_in_fresh_workers_unless_the_spec_lets_idle_ones_take_them():
    """Ray's max_calls: 1, the worker exits with its stage (the default); 0, no limit."""
    from orchestrator.execution.stages import stage_task
    from pipelines.operations import ResourcesSpec

    def body():
        return None

    assert stage_task(body, ResourcesSpec())._default_options["max_calls"] == 1
    assert stage_task(body, ResourcesSpec(fresh_stage_workers=False))._default_options["max_calls"] == 0


@pytest.mark.parametrize(
    "method,arch,old",
    [
        ("none", "mlp-small", None),
        ("fd-lm", "mlp-small", "mlp-small"),
        ("bcwi", "small-cnn", "small-cnn"),
        ("ensemble", "mlp-small", None),
    ],
)
def test_baselines_through_the_same_pipeline(ray_cluster, old_checkpoints, spec_document, tmp_path, method, arch, old):
    document = spec_document(
        version=f"v2-{method}",
        arch=arch,
        method={"name": method, "m": 2},
        data=DATA,
        old=old_checkpoints[old] if old else None,
    )
    result = run_update(document, tmp_path / "out")
    metrics = result.metrics
    assert 0 < metrics["error_rate"] < 0.9
    if old:
        assert set(metrics["vs_old"]) >= {"nfr", "pfr", "rel_nfr", "er_old", "er_new"}
    if method == "ensemble":
        assert result.checkpoint is None and len(result.replicas) == 2
        assert result.teacher_pool.batches_served == 0  # the paragon needs no student
    if method == "bcwi":
        sweep = result.bcwi.sweep
        assert [row["alpha"] for row in sweep] == [i / 10 for i in range(11)]
        assert result.checkpoint.endswith("model-bcwi.pt")
        picked = next(row for row in sweep if row["alpha"] == result.bcwi.alpha)
        assert picked["error_rate"] <= sweep[0]["error_rate"] + parse_spec(document).method.bcwi_er_tolerance
    if method == "fd-lm":
        assert result.teacher_pool.batches_served == result.student.steps


def test_a_user_architecture_runs_through_bcwi(ray_cluster, fashion_mnist, spec_document, tmp_path):
    """A user model factory (allow_user_factories) reaches every stage that rebuilds the model:
    the old model's check, the fine-tuning, BCWI's sweep on a worker, the evaluation and the
    registration. (Any importable `module:function` is a user factory; this one ships with workers.)"""
    arch = "workers.models.architectures:small_cnn"
    settings = ModelSettings(arch, 10)
    old = settings.build(seed=3, allow_user_factories=True)
    train(old, fashion_mnist.train.take(slice(0, 500)), TrainConfig(epochs=1, lr=0.05, seed=3))
    path = save_checkpoint(tmp_path / "old.pt", old, settings)
    result = run_update(
        spec_document(version="v2-user", arch=arch, allow_user_factories=True, method={"name": "bcwi"}, old=str(path)),
        tmp_path / "out",
    )
    assert result.bcwi is not None and result.registered_version is not None
    assert 0 < result.metrics["error_rate"] < 0.9


def test_in_process_teachers_and_packed_replicas(ray_cluster, spec_document, tmp_path):
    """teacher_actors 0: the student task runs its teachers itself (no pool, no Ray hop); pack 2:
    both replicas in one task, as one batched model, each with its own checkpoint. `precision:
    bf16` reaches the student (and its MLflow run says so); packed replicas train fp32, and say so;
    a packed replica's checkpoint serves as the next version's `old`."""
    import mlflow

    resources = {**SPEC_RESOURCES, "teacher_actors": 0, "replica": {"cpus": 1, "pack": 2}}
    train = {**SPEC_TRAIN, "precision": "bf16"}
    result = run_update(
        spec_document(version="v2-local", method={"name": "elodi", "m": 2, "k": 3}, resources=resources, train=train),
        tmp_path / "out",
    )
    assert result.student.config["precision"] == "bf16"
    assert [r.config["precision"] for r in result.replicas] == ["fp32", "fp32"]
    nested = mlflow.search_runs(
        filter_string=f"tags.mlflow.parentRunId = '{result.run_id}'", search_all_experiments=True
    )
    params = {row["tags.mlflow.runName"]: row for _, row in nested.iterrows()}
    assert params["distillation"]["params.train.precision"] == "bf16"
    assert params["distillation"]["params.train.compile"] == "False"
    assert params["replica-0"]["params.train.precision"] == "fp32"
    following = run_update(
        spec_document(version="v3-fd", method={"name": "fd-lm"}, old=result.replicas[0].checkpoint), tmp_path / "next"
    )
    assert following.metrics["vs_old"]["nfr"] < 0.5
    assert result.teacher_pool is None and result.student.teacher_batches is None
    assert len(result.replicas) == 2 and len({r.pid for r in result.replicas}) == 1
    assert {r.seed for r in result.replicas} == {1, 2}
    assert result.replicas[0].checkpoint != result.replicas[1].checkpoint
    assert 0 < result.metrics["error_rate"] < 0.9 and "vs_paragon" in result.metrics
