"""Shared fixtures: the real Fashion-MNIST splits, an MLflow store, a two-node Ray cluster, the spec
documents the pipeline tests start from, and (from services.py) a real MLflow server on PostgreSQL
with artifacts in SeaweedFS S3."""

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from workers.data import load_splits

pytest_plugins = ["services"]

# Every Ray the tests start (the test cluster, embedded ones, those in subprocesses) ignores how full
# the machine's disk is: above 95 % each raylet prints a warning every 10 s into its driver's stderr,
# and the tests that read a command's stderr line by line would fail on a full CI disk.
os.environ.setdefault("RAY_local_fs_capacity_threshold", "1")


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


RAY_TEST_ENV = {
    "RAY_AUTH_MODE": "disabled",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_DEDUP_LOGS": "0",
    "RAY_enable_worker_prestart": "0",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop_processes_mentioning(marker: str, timeout: float = 30.0) -> None:
    """SIGTERM, then SIGKILL, every process whose command line or open files mention `marker`
    (this session's Ray directory): only our own cluster is stopped, never another one."""
    import signal

    def mentions(entry: Path) -> bool:
        if marker in (entry / "cmdline").read_bytes().decode(errors="replace"):
            return True  # gcs_server, raylets, monitors
        return any(marker in os.readlink(fd) for fd in (entry / "fd").iterdir())  # renamed ray:: agents

    def matching() -> list[int]:
        pids = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and int(entry.name) != os.getpid():
                try:
                    if mentions(entry):
                        pids.append(int(entry.name))
                except OSError:
                    pass
        return pids

    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in matching():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout
        while matching() and time.monotonic() < deadline:
            time.sleep(0.2)


@dataclass(frozen=True)
class RayCluster:
    address: str  # GCS address, for `ray.init` and `congruent run --ray-address`
    dashboard: str  # http://127.0.0.1:PORT, for the Jobs API (`congruent submit --jobs-address`)


@pytest.fixture(scope="session")
def ray_cluster():
    """A real two-node Ray cluster on 127.0.0.1 (`ray start` head with the dashboard and Jobs API,
    plus a worker node; 1 CPU each), in a Ray directory of its own. The cluster's processes are
    stopped afterwards."""
    import tempfile

    os.environ.update(RAY_TEST_ENV)
    ray_cli = str(Path(sys.executable).with_name("ray"))
    port, dashboard_port = _free_port(), _free_port()
    ray_dir = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # short: Ray's socket paths must stay < 108 bytes
    common = ["--num-cpus", "1", "--disable-usage-stats"]

    def node_ports() -> list[str]:  # each node's agents on free ports: never clash with another Ray here
        return [
            "--dashboard-agent-listen-port",
            str(_free_port()),
            "--dashboard-agent-grpc-port",
            str(_free_port()),
            "--runtime-env-agent-port",
            str(_free_port()),
            "--metrics-export-port",
            str(_free_port()),
        ]

    address = f"127.0.0.1:{port}"
    # as from an activated venv: a Ray Job's `python` entrypoint is this venv's python
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    try:
        subprocess.run(
            [
                ray_cli,
                "start",
                "--head",
                "--node-ip-address",
                "127.0.0.1",
                "--port",
                str(port),
                "--include-dashboard",
                "true",
                "--dashboard-host",
                "127.0.0.1",
                "--dashboard-port",
                str(dashboard_port),
                "--temp-dir",
                ray_dir,
                *common,
                *node_ports(),
            ],
            check=True,
            capture_output=True,
            timeout=120,
            env=env,
        )
        subprocess.run(
            [ray_cli, "start", "--address", address, "--node-ip-address", "127.0.0.1", *common, *node_ports()],
            check=True,
            capture_output=True,
            timeout=120,
            env=env,
        )
        import ray

        ray.init(address=address, logging_level="ERROR")
        deadline = time.monotonic() + 60
        while len([n for n in ray.nodes() if n["Alive"]]) < 2 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert len([n for n in ray.nodes() if n["Alive"]]) == 2, "the worker node did not join"
        yield RayCluster(address, f"http://127.0.0.1:{dashboard_port}")
    finally:
        import ray

        ray.shutdown()
        _stop_processes_mentioning(ray_dir)


# The spec every pipeline test starts from: a Fashion-MNIST slice, one epoch, one CPU per task.
SPEC_DATA = {"train_limit": 2000, "eval_limit": 800}
SPEC_TRAIN = {"epochs": 1, "batch_size": 128, "lr": 0.05, "seed": 0}
SPEC_RESOURCES = {"replica": {"cpus": 1}, "student": {"cpus": 1}, "teacher": {"cpus": 0.5}, "teacher_actors": 2}


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
    from orchestrator.driver.preflight import preflight
    from orchestrator.driver.watch import StageWatch
    from orchestrator.tracking.store import configure
    from pipelines.spec import parse_spec

    configure()
    return run_pipeline(preflight(parse_spec(document)), Path(run_dir), StageWatch())


@pytest.fixture(scope="session")
def tweet_shards(tmp_path_factory):
    """3,000 real tweets (every 12th of the corpus: all three classes) in three parquet shards."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import torch

    from workers.data.text import load_tweet_sentiment

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
