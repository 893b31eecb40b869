"""Faults injected for real on the two-node Ray cluster: a replica's worker, a teacher actor and
the driver are killed by pid with SIGKILL mid-run; each pipeline still completes, resumes from its
last checkpoint instead of retraining, and registers exactly one version."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from mlflow import MlflowClient

from conftest import run_update
from orchestrator.execution.pool import TeacherPool
from pipelines.spec import parse_spec
from reliability_records import record
from workers.models.checkpoints import ModelSettings, load_model, read_checkpoint, save_checkpoint
from workers.teachers.frozen import FrozenModels
from workers.training.config import TrainConfig
from workers.training.trainer import train

KILL_TIMEOUT_S = 240.0


@pytest.fixture
def fault_spec(spec_document):
    """The faulted pipelines' spec: small-cnn, 3 epochs on 2,000 images (a fault lands in epoch 2 or 3)."""

    def make(**fields) -> dict:
        return spec_document(
            **{
                "model": "faults",
                "version": "v1",
                "arch": "small-cnn",
                "data": {"train_limit": 2000, "eval_limit": 500},
                "train": {"epochs": 3, "lr": 0.05, "seed": 0},
                **fields,
            }
        )

    return make


def checkpoint_epoch(path: Path) -> int:
    """Epochs stored in a checkpoint; 0 when there is none yet (or it is being replaced)."""
    try:
        return int(read_checkpoint(path)["epoch"]) if path.exists() else 0
    except Exception:  # noqa: BLE001 - a checkpoint mid-rename reads as not there yet
        return 0


def first_match(folder: Path, pattern: str) -> Path | None:
    return next(iter(sorted(folder.glob(pattern))), None)


class Killer(threading.Thread):
    """Polls `target()` for a pid and SIGKILLs it once; `killed` holds the pid (None: never)."""

    def __init__(self, target: Callable[[], int | None], timeout_s: float = KILL_TIMEOUT_S) -> None:
        super().__init__(daemon=True)
        self.target, self.timeout_s, self.killed, self.error = target, timeout_s, None, None

    def run(self) -> None:
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            try:
                pid = self.target()
            except Exception as e:  # noqa: BLE001 - reported by the test's assertion
                self.error = e
                return
            if pid:
                os.kill(pid, signal.SIGKILL)
                self.killed = pid
                return
            time.sleep(0.1)


def running_task_pid(dashboard: str, name: str) -> int | None:
    from ray.util.state import list_tasks

    tasks = list_tasks(
        dashboard, filters=[("name", "=", name), ("state", "=", "RUNNING")], raise_on_missing_output=False
    )
    return next((t.worker_pid for t in tasks if t.worker_pid), None)


def teacher_actors(dashboard: str) -> list:
    from ray.util.state import list_actors

    return list_actors(
        dashboard, filters=[("class_name", "=", "PooledTeacher")], detail=True, raise_on_missing_output=False
    )


@pytest.fixture(scope="module")
def old_checkpoint(tmp_path_factory, fashion_mnist):
    settings = ModelSettings("mlp-small", 10)
    model = settings.build(seed=7)
    train(model, fashion_mnist.train.take(slice(0, 1000)), TrainConfig(epochs=1, lr=0.05, seed=7))
    return str(save_checkpoint(tmp_path_factory.mktemp("old") / "old.pt", model, settings))


def test_killed_replica_worker_resumes_from_its_last_checkpoint(ray_cluster, fault_spec, tmp_path):
    document = fault_spec(model="faults-replica", method={"name": "ensemble", "m": 2})
    spec = parse_spec(document)
    replicas = tmp_path / "storage" / spec.model / "replicas"

    def replica_mid_training() -> int | None:
        checkpoint = first_match(replicas, "*/replica-0.pt")
        if checkpoint is None or not 1 <= checkpoint_epoch(checkpoint) < spec.train.epochs:
            return None
        return running_task_pid(ray_cluster.dashboard, "replica-0")

    killer = Killer(replica_mid_training)
    killer.start()
    result = run_update(document, tmp_path / "out")
    killer.join()
    replica = result.replicas[0]
    record(
        "fault",
        fault="replica worker SIGKILL",
        killed_pid=killer.killed,
        survived=killer.killed is not None,
        resumed_from=replica.resumed_from,
        epochs_run=replica.epochs_run,
        new_pid=replica.pid,
    )
    assert killer.killed is not None, f"replica-0 finished before it could be killed ({killer.error!r})"
    assert replica.pid != killer.killed  # Ray retried the task in a new worker process
    assert replica.resumed_from >= 1 and replica.epochs_run == spec.train.epochs - replica.resumed_from
    assert [h["epoch"] for h in replica.history] == list(range(1, spec.train.epochs + 1))
    assert result.replicas[1].resumed_from == 0  # the other replica was not touched
    assert 0 < result.metrics["error_rate"] < 0.9


def test_killed_teacher_actor_restarts_and_the_student_is_the_fault_free_one(
    ray_cluster, old_checkpoint, fault_spec, tmp_path
):
    """An actor SIGKILLed mid-distillation: Ray restarts it and the pool replays or re-sends its
    batches. Had a batch been skipped, doubled or answered by the wrong teacher, the student would
    differ from the one a fault-free run of the same seed trains: it does not."""
    document = fault_spec(model="faults-teacher", method={"name": "fd-lm"}, old=old_checkpoint)
    spec = parse_spec(document)
    storage = tmp_path / "storage" / spec.model

    def actor_mid_distillation() -> int | None:
        checkpoint = first_match(storage, "v1/*/model.pt")
        if checkpoint is None or not 1 <= checkpoint_epoch(checkpoint) < spec.train.epochs:
            return None
        alive = [a for a in teacher_actors(ray_cluster.dashboard) if a.state == "ALIVE" and a.pid]
        return alive[0].pid if alive else None

    killer = Killer(actor_mid_distillation)
    killer.start()
    result = run_update(document, tmp_path / "out")
    killer.join()
    restarts = sum(a.num_restarts for a in teacher_actors(ray_cluster.dashboard))
    clean = run_update(
        {**document, "model": "faults-teacher-clean", "storage": str(tmp_path / "clean")}, tmp_path / "clean-out"
    )
    faulted_logits, clean_logits = (np.load(r.predictions["new"]) for r in (result, clean))
    batches = result.student.teacher_batches
    record(
        "fault",
        fault="teacher actor SIGKILL",
        killed_pid=killer.killed,
        survived=killer.killed is not None,
        actor_restarts=restarts,
        steps=result.student.steps,
        **{f"batches_{k}": v for k, v in batches.items()},
        same_student_as_fault_free=bool(np.array_equal(faulted_logits.argmax(1), clean_logits.argmax(1))),
    )
    assert killer.killed is not None, f"the student finished before an actor could be killed ({killer.error!r})"
    assert killer.killed not in result.teacher_pool.pids and len(result.teacher_pool.pids) == 2
    assert restarts >= 1 and result.student.resumed_from == 0
    assert result.student.steps == clean.student.steps
    assert np.array_equal(faulted_logits.argmax(1), clean_logits.argmax(1))
    assert np.allclose(faulted_logits, clean_logits, rtol=0, atol=1e-4)
    assert result.registered_version == "1"


def rerun_closed_the_killed_run(model: str, pid: int | None) -> bool:
    client = MlflowClient()
    runs = client.search_runs([client.get_experiment_by_name(model).experiment_id], f"tags.`driver.pid` = '{pid}'")
    return [r.info.status for r in runs] == ["KILLED"]


def test_killed_driver_rerun_reuses_finished_stages_and_registers_once(ray_cluster, fault_spec, tmp_path, monkeypatch):
    document = fault_spec(
        model="faults-driver", method={"name": "elodi", "m": 2, "k": 3}, data={"train_limit": 1000, "eval_limit": 300}
    )
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(document))
    spec = parse_spec(document)
    storage = tmp_path / "storage" / spec.model
    env = {**os.environ, "RAY_ADDRESS": "", "AWS_SECRET_ACCESS_KEY": "never-logged-7f3a9c"}
    driver = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "orchestrator",
            "run",
            str(spec_path),
            "--ray-address",
            ray_cluster.address,
            "--out",
            str(tmp_path / "out"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )

    def driver_mid_distillation() -> int | None:
        checkpoint = first_match(storage, "v1/*/model.pt")
        epoch = checkpoint_epoch(checkpoint) if checkpoint else 0
        return driver.pid if 1 <= epoch < spec.train.epochs and driver.poll() is None else None

    killer = Killer(driver_mid_distillation)
    try:
        killer.run()  # in this thread: the driver is another process
        driver.wait(timeout=60)
    finally:  # a driver the killer missed does not go on beside the tests after this one
        driver.kill()
    assert killer.killed == driver.pid and driver.returncode == -signal.SIGKILL, driver.stdout.read()[-2000:]

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", env["AWS_SECRET_ACCESS_KEY"])
    rerun = run_update(document, tmp_path / "out")
    again = run_update(document, tmp_path / "out-again")
    record(
        "fault",
        fault="driver SIGKILL, then the same spec rerun twice",
        killed_pid=killer.killed,
        survived=rerun.registered_version is not None,
        rerun_replica_epochs_run=[r.epochs_run for r in rerun.replicas],
        rerun_student_resumed_from=rerun.student.resumed_from,
        rerun_student_epochs_run=rerun.student.epochs_run,
        third_run_epochs_run=[r.epochs_run for r in again.replicas] + [again.student.epochs_run],
        versions=[rerun.registered_version, again.registered_version],
        killed_run_closed=rerun_closed_the_killed_run(spec.model, killer.killed),
    )
    # the replicas finished before the kill: reused, not retrained; the student resumed
    assert [r.epochs_run for r in rerun.replicas] == [0, 0]
    assert 1 <= rerun.student.resumed_from < spec.train.epochs
    assert rerun.student.epochs_run == spec.train.epochs - rerun.student.resumed_from
    # a third run of the same spec trains nothing and registers nothing new
    assert [r.epochs_run for r in again.replicas] == [0, 0] and again.student.epochs_run == 0
    assert rerun.registered_version == again.registered_version == "1"
    assert [str(v.version) for v in MlflowClient().search_model_versions(f"name='{spec.model}'")] == ["1"]
    assert json.loads((tmp_path / "out-again" / "result.json").read_text())["metrics"] == rerun.metrics
    # the S3 secret of the driver's environment appears in no param or tag of any run
    client = MlflowClient()
    runs = client.search_runs([client.get_experiment_by_name(spec.model).experiment_id])
    logged = json.dumps([{**r.data.params, **r.data.tags} for r in runs])
    assert len(runs) > 3 and "never-logged-7f3a9c" not in logged
    # the killed driver's run was closed by the rerun, not left RUNNING
    killed = [r for r in runs if r.data.tags.get("driver.pid") == str(killer.killed)]
    assert [r.info.status for r in killed] == ["KILLED"] and "had died" in killed[0].data.tags["ended_by"]
    assert not [r for r in runs if r.info.status == "RUNNING"]


def test_pool_resends_the_batches_of_an_actor_that_died_for_good(ray_cluster, tmp_path):
    """Past Ray's own restarts (here: none allowed), the pool sends a dead actor's batches to the
    next actor: every batch is answered once, with the right logits."""
    import ray

    from orchestrator.execution.pool import PooledTeacher
    from workers.data import batch_inputs, epoch_batches

    settings = ModelSettings("mlp-small", 10)
    paths = [str(save_checkpoint(tmp_path / f"r{i}.pt", settings.build(seed=i), settings)) for i in range(2)]
    images = torch.randint(0, 256, (24, 1, 28, 28), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    actor_class = ray.remote(PooledTeacher)
    actors = [actor_class.options(num_cpus=0.25, max_restarts=0).remote({"teacher": paths}) for _ in range(2)]
    try:  # a failed assertion leaves no actor to hold the shared cluster's CPUs
        doomed = ray.get(actors[0].info.remote())["pid"]
        ray.get(actors[1].info.remote())
        os.kill(doomed, signal.SIGKILL)
        pool = TeacherPool(actors, ("teacher",), ray.put(images.numpy()))
        batches = list(epoch_batches(len(images), 4, seed=0, epoch=0))  # indices and augmentation draws
        pending = [pool.request(batch_inputs(images, batch), batch) for batch in batches]
        answers = [collect()["teacher"] for collect in pending]
        reference = FrozenModels([load_model(p)[0] for p in paths])
        assert all(
            torch.allclose(answer, reference(batch_inputs(images, batch)), atol=1e-5)
            for answer, batch in zip(answers, batches)
        )
        deliveries = pool.deliveries()
        record(
            "fault",
            fault="teacher actor SIGKILL, no restarts left",
            killed_pid=doomed,
            survived=deliveries["distinct"] == 6,
            **{f"batches_{k}": v for k, v in deliveries.items()},
        )
        assert deliveries["requested"] == deliveries["delivered"] == deliveries["distinct"] == 6
        assert deliveries["duplicates"] == 0 and deliveries["resubmitted"] >= 3
    finally:
        for actor in actors:
            ray.kill(actor)
