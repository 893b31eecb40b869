"""No library chatter on the terminal: palette PNGs with transparency are read through RGBA (no PIL
warning, in the driver or a worker), and a Tune search prints none of Tune's own lines (where its
results are, a TensorBoard hint). Each runs in a fresh process, as a user's command would.
Ray Data's own notices (its progress bars off, a reading pool larger than the files) never reach
stderr either: those tests read Ray Data in this process, on the session cluster."""

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

from workers.data.sources import load_images
from workers.pixels import pixels

ROOT = Path(__file__).resolve().parent.parent
PALETTE = [0, 0, 0, 250, 20, 20, 20, 250, 20, 20, 20, 250, 250, 250, 250]  # black, red, green, blue, white


def _palette_png(path: Path, indices: np.ndarray) -> None:
    """A palette PNG whose transparency is a byte per palette entry (entry 0 clear, 2 half)."""
    img = Image.fromarray(indices.astype(np.uint8), "P")
    img.putpalette(PALETTE + [0] * (768 - len(PALETTE)))
    img.save(path, transparency=bytes([0, 255, 128, 255, 255]))


def _palette_folder(root: Path, classes: int = 4, per_class: int = 30) -> Path:
    rng = np.random.default_rng(0)
    for c in range(classes):
        (root / f"class_{c}").mkdir(parents=True)
        for i in range(per_class):
            indices = rng.integers(0, 5, (12, 12))
            indices[c * 3 : c * 3 + 3] = c + 1  # a band per class: something to learn
            _palette_png(root / f"class_{c}" / f"{i}.png", indices)
    return root


def _env(tmp_path: Path) -> dict[str, str]:
    drop = ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI", "RAY_ADDRESS", "RAY_AUTH_MODE", "PYTHONWARNINGS")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    return {**env, "HOME": str(tmp_path), "PYTHONPATH": str(ROOT), "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/m.db"}


def test_palette_transparency_is_composited_over_black_without_a_warning(tmp_path):
    _palette_png(tmp_path / "p.png", np.array([[0, 1, 2, 3, 4]]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # PIL's "Palette images with Transparency … bytes" would raise
        with Image.open(tmp_path / "p.png") as img:
            assert img.mode == "P" and isinstance(img.info["transparency"], bytes)
            read = pixels(img)
    # clear → black; opaque red and blue as they are; half-transparent green at half its value
    assert read.tolist() == [[[0, 0, 0], [250, 20, 20], [10, 125, 10], [20, 20, 250], [250, 250, 250]]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pool, _ = load_images(_palette_folder(tmp_path / "tree", classes=2, per_class=3))
    assert pool.images.shape == (6, 3, 12, 12)


def test_a_run_on_palette_pngs_prints_only_our_own_lines(tmp_path):
    spec = {
        "model": "palette",
        "version": "v1",
        "arch": "mlp-small",
        "method": {"name": "none"},
        "data": {"path": str(_palette_folder(tmp_path / "images"))},
        "train": {"epochs": 1, "batch_size": 32, "lr": 0.05, "seed": 0},
        "resources": {
            "replica": {"cpus": 1},
            "student": {"cpus": 1},
            "teacher_actors": 0,
            "fresh_stage_workers": False,
        },
        "storage": str(tmp_path / "storage"),
    }
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", "run", "spec.yaml", "--out", "out"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env=_env(tmp_path),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "registered palette version 1" in done.stdout
    assert done.stderr == "", done.stderr  # a run that succeeds says everything on stdout, in its own words


TUNE_PROBE = """
import ray
from ray import tune
from orchestrator.execution.tune_stop import StopOnCtrlC, fit_until_ctrl_c

def trial(config):
    tune.report({"val_error_rate": config["x"]})

ray.init(num_cpus=1, include_dashboard=False, logging_level="ERROR")
stopper = StopOnCtrlC()
tuner = tune.Tuner(
    trial,
    param_space={"x": tune.grid_search([0.1, 0.2])},
    tune_config=tune.TuneConfig(metric="val_error_rate", mode="min"),
    run_config=tune.RunConfig(name="probe", storage_path=STORAGE, verbose=0, stop=stopper),
)
results = fit_until_ctrl_c(tuner, stopper.pressed)
print("trials", len(results))
ray.shutdown()
"""


def test_a_tune_search_prints_none_of_tunes_own_lines(tmp_path):
    probe = TUNE_PROBE.replace("STORAGE", repr(str(tmp_path / "tune")))
    env = {**_env(tmp_path), "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "trials 2", done.stdout  # no "View detailed results here", no TensorBoard hint
    assert "TensorBoard" not in done.stderr and "tensorboard" not in done.stderr, done.stderr


@pytest.fixture
def s3_env(mlflow_stack, monkeypatch):
    """The shared S3 with a bucket `quiet-runs`, this process's environment pointed at it."""
    from servers import s3_environment

    with s3_environment(monkeypatch, mlflow_stack.data_bucket("quiet-runs")):
        yield


def test_a_rerun_removes_the_s3_leftovers_of_its_killed_predecessor_and_says_so(s3_env, spec_document, tmp_path):
    import socket

    import mlflow
    from mlflow import MlflowClient

    from orchestrator.tracking import runs
    from orchestrator.tracking.store import experiment_id
    from pipelines.spec import parse_spec
    from workers import storage

    spec = parse_spec(spec_document(model="leftovers", storage="s3://quiet-runs/ckpt"))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(timeout=60)  # a driver that was killed: its pid is gone
    client = MlflowClient()
    experiment = experiment_id(spec.model)
    folder, other = "s3://quiet-runs/ckpt/leftovers/v2/tmp/tune-abc", "s3://quiet-runs/ckpt/leftovers/v2/tmp/tune-kept"
    # a tag anyone with MLflow write access can set: trees outside the run's own root stay
    foreign = ["s3://quiet-runs/other-project", "s3://quiet-runs/ckpt/leftovers/v2/tmp-not", str(tmp_path / "mine")]
    predecessor = client.create_run(experiment, tags={"spec_hash": spec.spec_hash, "mlflow.runName": "v2-tune"})
    run_id = predecessor.info.run_id
    tags = {"driver.host": socket.gethostname(), "driver.pid": str(dead.pid)}
    for key, value in {**tags, runs.TEMPORARY_TAG: json.dumps([folder, *foreign])}.items():
        client.set_tag(run_id, key, value)
    for name in ("1.pt", "2.pt"):
        storage.upload(__file__, f"{folder}/{name}")
    storage.upload(__file__, f"{other}/3.pt")  # another search's (finished) folder stays
    for tree in foreign:
        storage.upload(__file__, storage.join(tree, "keep.pt"))

    said: list[str] = []
    with runs.pipeline_run(spec, say=said.append):
        pass
    removed = f"removed what the interrupted run {run_id[:8]} (driver {dead.pid} died) left: {folder} (2 files)"
    left = f"left alone what run {run_id[:8]} listed outside {runs.temporary_root(spec)}: {', '.join(foreign)}"
    assert said == [f"{removed}; {left}"]
    assert storage.delete_tree(folder) == 0 and storage.delete_tree(other) == 1
    assert [storage.delete_tree(tree) for tree in foreign] == [1, 1, 1]
    assert client.get_run(run_id).info.status == "KILLED"
    said.clear()
    with runs.pipeline_run(spec, say=said.append):  # nothing left to remove: nothing said
        pass
    assert said == [] and mlflow.active_run() is None


def test_a_stream_tells_the_user_nothing_of_ray_datas_progress_bars(ray_cluster, capfd):
    """Ray Data warns once per process that its progress bars are off ("Progress bars disabled. To
    enable, set …"): Congruent turned them off, so the line would only tell a user how to undo it."""
    from ray.util import debug

    from orchestrator.dataplane.ray_reading import files_dataset

    debug._logged.discard("ray_data_progress_manager_disabled")  # as in a fresh process, whatever ran before
    rows = list(files_dataset(["a", "b", "c"], 0, lambda batch: batch, 1).iter_rows())
    assert sorted(row["file"] for row in rows) == ["a", "b", "c"]
    assert "Progress bars disabled" not in capfd.readouterr().err


def test_reading_fewer_files_than_readers_says_nothing_of_idle_readers(ray_cluster, capfd):
    """One file (a single table given to `predict`, a one-shard stream) is one read call: a pool of
    READERS tasks for it made Ray Data warn on the user's terminal that it could launch fewer tasks
    than its concurrency limit."""
    from orchestrator.dataplane.ray_reading import READERS, files_dataset

    assert READERS > 1
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rows = list(files_dataset(["only"], None, lambda batch: batch, 1).iter_rows())
    assert [row["file"] for row in rows] == ["only"]
    assert [str(w.message) for w in caught if "concurrent tasks" in str(w.message)] == []
    assert "concurrent tasks" not in capfd.readouterr().err
