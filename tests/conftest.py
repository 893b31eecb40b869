"""Shared fixtures: the real Fashion-MNIST splits, an MLflow store, a two-node Ray cluster, the spec
documents the pipeline tests start from, and (from services.py) a real MLflow server on PostgreSQL
with artifacts in SeaweedFS S3."""

import os
import time
from pathlib import Path

import pytest
import yaml

from ray_nodes import start_ray_cluster, stop_ray_cluster
from workers.data import load_splits

pytest_plugins = ["services"]

# Every Ray the tests start (the test cluster, embedded ones, those in subprocesses) ignores how full
# the machine's disk is: above 95 % each raylet prints a warning every 10 s into its driver's stderr,
# and the tests that read a command's stderr line by line would fail on a full CI disk.
os.environ.setdefault("RAY_local_fs_capacity_threshold", "1")
# Ray Serve's HTTP proxy must report ready within 5 s, three times, or is killed and started again:
# on 2 busy cores its start takes longer (tests/test_serve_live.py); driver/serve.py sets the same
os.environ.setdefault("RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S", "120")


def pytest_collection_modifyitems(items):
    """Mark each test by the session resources its fixtures start: `cluster` (the two-node Ray
    cluster), `services` (PostgreSQL, SeaweedFS, MLflow), so `-m` can select by what a test needs.

    `make test` runs the suite in two pytest-xdist processes (`--dist loadfile`), each with its own
    session cluster and services; a module's tests run in one process, in their order, so a
    module-scoped fixture (servers, a trained v1, a data tree in S3) is built once. (`--dist
    loadgroup` with marks per module did not group them: pytest-xdist 3.8 renames node ids through
    an attribute pytest 9.2 no longer reads, so every test went wherever a process was free.)"""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if "ray_cluster" in names:
            item.add_marker(pytest.mark.cluster)
        if "mlflow_stack" in names:
            item.add_marker(pytest.mark.services)


@pytest.fixture(scope="session", autouse=True)
def mlflow_store(tmp_path_factory):
    """Every test that tracks runs uses an embedded sqlite store of its own, not the checkout's."""
    folder = tmp_path_factory.mktemp("mlflow")
    previous = os.environ.get("MLFLOW_TRACKING_URI")
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{folder / 'mlflow.db'}"
    yield folder
    if previous is None:
        os.environ.pop("MLFLOW_TRACKING_URI", None)
    else:
        os.environ["MLFLOW_TRACKING_URI"] = previous


@pytest.fixture(scope="session")
def fashion_mnist():
    """Fashion-MNIST from the Debian package (installed by `make test`), all of it."""
    return load_splits("fashion-mnist")


@pytest.fixture(scope="session")
def ray_cluster():
    """A real two-node Ray cluster on 127.0.0.1 (ray_nodes.py; 1 CPU each), joined by this process.
    The cluster's processes are stopped afterwards."""
    import ray

    cluster = start_ray_cluster(cpus_per_node=1)
    try:
        ray.init(address=cluster.address, logging_level="ERROR")
        deadline = time.monotonic() + 60
        while len([n for n in ray.nodes() if n["Alive"]]) < 2 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert len([n for n in ray.nodes() if n["Alive"]]) == 2, "the worker node did not join"
        yield cluster
    finally:
        ray.shutdown()
        stop_ray_cluster(cluster)


# The spec every pipeline test starts from: a Fashion-MNIST slice, one epoch, one CPU per task, and
# stages that reuse idle workers (a fresh worker per stage costs each of the suite's ~80 pipelines a
# process start and torch's import per stage; tests/test_pipeline.py checks the default, fresh ones).
SPEC_DATA = {"train_limit": 2000, "eval_limit": 800}
SPEC_TRAIN = {"epochs": 1, "batch_size": 128, "lr": 0.05, "seed": 0}
SPEC_RESOURCES = {
    "replica": {"cpus": 1},
    "student": {"cpus": 1},
    "teacher": {"cpus": 0.5},
    "teacher_actors": 2,
    "fresh_stage_workers": False,
}


@pytest.fixture
def spec_document(tmp_path):
    """`spec_document(**fields)`: a spec as a dict (model fmnist, version v2, arch mlp-small, method
    none, checkpoints under tmp_path/storage) with `fields` replacing whole keys."""

    def make(**fields) -> dict:
        return {
            "model": "fmnist",
            "version": "v2",
            "arch": "mlp-small",
            "method": {"name": "none"},
            "data": SPEC_DATA,
            "train": SPEC_TRAIN,
            "resources": SPEC_RESOURCES,
            "storage": str(tmp_path / "storage"),
            **fields,
        }

    return make


@pytest.fixture
def spec_file(tmp_path, spec_document):
    """`spec_file(name, **fields)`: `spec_document(**fields)` written to tmp_path/NAME.yaml."""

    def write(name: str = "spec", **fields) -> Path:
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(spec_document(**fields)))
        return path

    return write


def run_update(document: dict, run_dir: Path):
    """One pipeline in this process, on the Ray it is connected to, without progress display:
    preflight, then every stage; returns the PipelineResult."""
    from orchestrator.driver.pipeline import run_pipeline
    from orchestrator.execution.watch import StageWatch
    from orchestrator.planning.preflight import preflight
    from orchestrator.tracking.store import configure
    from pipelines.spec import parse_spec

    configure()
    return run_pipeline(preflight(parse_spec(document)), Path(run_dir), StageWatch())


def cli_runs(documents: dict[str, dict], folder: Path, ray_address: str, env: dict) -> dict[str, dict]:
    """`congruent run SPEC --ray-address ADDRESS --json` of each {version: spec document} in turn, each
    in a subprocess with `env` and `--out FOLDER/VERSION`; their JSON results by version (a failed
    run fails the test with the tail of its stderr)."""
    import json
    import subprocess
    import sys

    results = {}
    for version, document in documents.items():
        spec = folder / f"{version}.yaml"
        spec.write_text(yaml.safe_dump(document))
        argv = ["run", str(spec), "--ray-address", ray_address, "--out", str(folder / version), "--json"]
        done = subprocess.run(
            [sys.executable, "-m", "orchestrator", *argv], env=env, capture_output=True, text=True, timeout=900
        )
        assert done.returncode == 0, done.stderr[-3000:]
        results[version] = json.loads(done.stdout)
    return results


def cli_runs_here(documents: dict[str, dict], folder: Path, ray_address: str, capsys) -> dict[str, dict]:
    """`cli_runs` in this process (`congruent run ... --json` through `orchestrator.cli.main`, on the
    Ray this process joined): for a test of the command whose point is not a fresh interpreter or a
    driver environment of its own; the caller sets the environment (monkeypatch)."""
    import json

    from orchestrator.cli import main

    results = {}
    for version, document in documents.items():
        spec = folder / f"{version}.yaml"
        spec.write_text(yaml.safe_dump(document))
        capsys.readouterr()
        code = main(["run", str(spec), "--ray-address", ray_address, "--out", str(folder / version), "--json"])
        captured = capsys.readouterr()
        assert code == 0, captured.err[-3000:]
        results[version] = json.loads(captured.out.strip().splitlines()[-1])
    return results


@pytest.fixture(scope="session")
def tweet_shards(tmp_path_factory):
    """3,000 real tweets (every 12th of the corpus: all three classes) in three parquet shards."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import torch

    from workers.data.text_tables import load_tweet_sentiment

    tweets = load_tweet_sentiment()
    picked = torch.arange(0, len(tweets), 12)[:3000]
    folder = tmp_path_factory.mktemp("tweets")
    for shard in range(3):
        rows = picked[shard::3]
        table = {
            "text": [tweets.texts[i] for i in rows.tolist()],
            "sentiment": [tweets.classes[int(tweets.labels[i])] for i in rows.tolist()],
        }
        pq.write_table(pa.table(table), folder / f"part-{shard}.parquet")
    return folder, tweets.take(picked)
