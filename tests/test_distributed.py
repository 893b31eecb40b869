"""Data-parallel stages through Ray Train on the two-node cluster (CPU, gloo): a replica and an ELODI
student each spread over 2 workers, checkpoints through Ray Train, a worker killed mid-run."""

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from conftest import SPEC_RESOURCES, run_update

DATA = {"train_limit": 3000, "eval_limit": 500}


def two_workers(**replica) -> dict:
    return {**SPEC_RESOURCES, "replica": {"cpus": 1, "workers": 2, **replica}}


def test_placement_of_workers_beside_spread_teacher_actors_by_hand():
    from orchestrator.planning.resources import placeable

    two_nodes = [(1.0, 0.0), (1.0, 0.0)]
    # two actors of 0.25 CPU, one per node, leave 0.75 on each: two student workers of 0.75 fit
    assert placeable(two_nodes, [(0.25, 0.0)] * 2, [(0.75, 0.0)] * 2)
    # of 0.8 they do not (the same total would fit a single 2-CPU node: totals are not enough)
    assert not placeable(two_nodes, [(0.25, 0.0)] * 2, [(0.8, 0.0)] * 2)
    assert placeable([(2.0, 0.0)], [(0.25, 0.0)] * 2, [(0.75, 0.0)] * 2)
    # GPUs count per node too: two workers of one GPU need two GPUs, not one node's one
    assert not placeable([(8.0, 1.0), (8.0, 0.0)], [], [(1.0, 1.0)] * 2)
    assert placeable([(8.0, 1.0), (8.0, 1.0)], [], [(1.0, 1.0)] * 2)


def test_a_non_finite_loss_on_one_worker_stops_every_worker_at_the_same_step(tmp_path):
    """Two gloo processes training one DDP model: rank 1's loss turns NaN at the step where the
    loop checks. Both stop there with NonFiniteLossError; before, rank 0 went on into the next
    step's gradient all-reduce and waited for a rank that had stopped (here until the process
    group's 20 s timeout)."""
    import torch.multiprocessing

    from ddp_processes import nan_on_one_rank

    started = time.monotonic()
    try:
        torch.multiprocessing.spawn(nan_on_one_rank, args=(2, str(tmp_path)), nprocs=2, join=True)
    except torch.multiprocessing.ProcessExitedException as e:
        # gloo may abort a process as it exits ("terminate called without an active exception"),
        # after its outcome is written: seen once in a loaded full suite, never alone. What this
        # test is about is each rank's outcome, so a crash before a rank wrote one still fails.
        if not (tmp_path / f"rank-{e.error_index}.json").exists():
            raise
    outcomes = [json.loads((tmp_path / f"rank-{rank}.json").read_text()) for rank in range(2)]
    assert outcomes == [{"ended": "NonFiniteLossError", "step": 2}] * 2
    assert time.monotonic() - started < 60


def test_batchnorm_is_synchronised_across_gpu_workers():
    """On GPUs (nccl) a data-parallel model's BatchNorm layers become SyncBatchNorm, so each step
    normalises by the statistics of the whole batch; on CPUs (gloo) SyncBatchNorm does not run, and
    they stay per shard (docs/architecture.md says what differs)."""
    import torch

    from workers.models.architectures import build_model
    from workers.tasks.resolve import data_parallel_batchnorm

    def kinds(model):
        return {type(m).__name__ for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)}

    assert kinds(data_parallel_batchnorm(build_model("small-cnn", 10), torch.device("cuda"))) == {"SyncBatchNorm"}
    assert kinds(data_parallel_batchnorm(build_model("small-cnn", 10), torch.device("cpu"))) == {"BatchNorm2d"}


def train_workers(dashboard: str) -> list:
    from ray.util.state import list_actors

    return list_actors(
        dashboard,
        filters=[("class_name", "=", "RayTrainWorker"), ("state", "=", "ALIVE")],
        detail=True,
        raise_on_missing_output=False,
    )


def test_a_replica_on_two_workers_uses_both_nodes_survives_a_killed_worker_and_registers(
    ray_cluster, spec_document, tmp_path
):
    document = spec_document(
        model="ddp-replica",
        version="v1",
        arch="small-cnn",
        data=DATA,
        method={"name": "ensemble", "m": 1},
        train={"epochs": 3, "lr": 0.05, "seed": 0},  # killed in epoch 2 or 3
        resources=two_workers(),
    )
    runs = tmp_path / "storage" / "ddp-replica" / "replicas"
    killed: list[int] = []

    def checkpoint_registered() -> bool:
        """Ray Train has recorded a checkpoint of this run (not just begun writing one)."""
        for snapshot in runs.glob("*/replica-0-train/checkpoint_manager_snapshot.json"):
            try:
                return json.loads(snapshot.read_text()).get("latest_checkpoint_result") is not None
            except ValueError:  # being rewritten
                return False
        return False

    def kill_a_worker_once_a_checkpoint_exists() -> None:
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and not killed:
            if checkpoint_registered():
                workers = [w for w in train_workers(ray_cluster.dashboard) if w.pid]
                if len(workers) == 2:
                    os.kill(workers[1].pid, signal.SIGKILL)
                    killed.append(workers[1].pid)
            time.sleep(0.2)

    killer = threading.Thread(target=kill_a_worker_once_a_checkpoint_exists, daemon=True)
    killer.start()
    result = run_update(document, tmp_path / "out")
    killer.join(timeout=5)
    replica = result.replicas[0]
    assert killed, "the replica finished before a worker could be killed"
    assert len(replica.node_id.split(",")) == 2  # the two workers ran on the two nodes
    assert 1 <= replica.resumed_from < 3 and replica.epochs_run == 3 - replica.resumed_from
    assert [h["epoch"] for h in replica.history] == [1, 2, 3]
    assert Path(replica.checkpoint).exists()  # the finished model where a one-worker replica would be
    assert 0 < result.metrics["error_rate"] < 0.9
    rerun = run_update(document, tmp_path / "again")
    assert rerun.replicas[0].epochs_run == 0  # the finished model is reused: nothing trains


def test_an_elodi_student_on_two_workers_gets_one_teacher_batch_per_worker_step(ray_cluster, spec_document, tmp_path):
    resources = {**SPEC_RESOURCES, "student": {"cpus": 0.75, "workers": 2}, "teacher": {"cpus": 0.25}}
    result = run_update(
        spec_document(
            model="ddp-student",
            version="v2",
            method={"name": "elodi", "m": 2, "k": 3},
            data={"train_limit": 2000, "eval_limit": 500},
            resources=resources,
        ),
        tmp_path / "out",
    )
    steps = result.student.steps
    per_worker = result.student.teacher_batches["per_worker"]
    assert steps == 16 and len(per_worker) == 2  # 2,000 images, global batch 128: 16 steps on each worker
    for worker in per_worker:
        assert worker["requested"] == worker["delivered"] == worker["distinct"] == steps
        assert worker["duplicates"] == 0 and worker["bytes_per_request"] < 64 * 8  # a shard's indices and draws
    assert result.teacher_pool.batches_served == 2 * steps  # both workers' steps, counted before the paragon
    assert result.registered_version is not None


def test_one_and_two_workers_learn_the_same_model(ray_cluster, spec_document, tmp_path):
    """Same seed and batches: one worker with batch 128, or two with 64 each and DDP averaging —
    the same SGD up to BatchNorm seeing 64 samples, not 128. Tolerance: 2 points of val ER."""
    records = {}
    for workers in (1, 2):
        document = spec_document(
            model=f"ddp-compare-{workers}",
            version="v1",
            arch="small-cnn",
            data=DATA,
            method={"name": "none"},
            train={"epochs": 2, "lr": 0.05, "seed": 3},
            resources={**SPEC_RESOURCES, "student": {"cpus": 1, "workers": workers}},
            storage=str(tmp_path / f"storage-{workers}"),
        )
        records[workers] = run_update(document, tmp_path / f"out-{workers}").student
    one, two = records[1], records[2]
    assert one.steps == two.steps == 48
    assert abs(one.val_error_rate - two.val_error_rate) <= 0.02, (one.val_error_rate, two.val_error_rate)
    print(json.dumps({"one_worker_val_er": one.val_error_rate, "two_workers_val_er": two.val_error_rate}))


def test_a_busy_cluster_makes_a_reservation_wait_and_a_lost_node_ends_the_wait(ray_cluster, monkeypatch):
    """The teacher pool's reservation waits in Ray's queue while other work holds the CPUs (ten
    pipelines on one cluster: none may fail for lack of resources), and fails in one line only once
    the alive nodes can no longer hold it."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    from orchestrator.execution import pool

    monkeypatch.setattr(pool, "RESERVATION_POLL_S", 0.5)

    @ray.remote(num_cpus=1)
    def hold(seconds: float) -> float:
        time.sleep(seconds)
        return time.time()

    busy = hold.remote(4.0)  # one of the two nodes' CPUs, for 4 s
    time.sleep(1.0)
    group = placement_group([{"CPU": 1.0}, {"CPU": 1.0}])
    try:
        pool._wait_for(group, [{"CPU": 1.0}, {"CPU": 1.0}])  # polled 0.5 s at a time: no timeout fires
        assert time.time() >= ray.get(busy) - 0.1  # reserved only once the busy task had ended
    finally:
        remove_placement_group(group)

    blocker = placement_group([{"CPU": 1.0}, {"CPU": 1.0}])
    ray.get(blocker.ready())
    group = placement_group([{"CPU": 1.0}])
    monkeypatch.setattr(pool, "node_capacities", lambda: [(1.0, 0.0)])  # as if a node had left
    try:
        with pytest.raises(pool.ReservationLost, match=r"no longer fit the cluster's alive nodes \[\(1.0, 0.0\)\]"):
            pool._wait_for(group, [{"CPU": 2.0}])
    finally:
        remove_placement_group(group)
        remove_placement_group(blocker)
