"""Many update pipelines at once on one two-node Ray cluster and one MLflow server (PostgreSQL,
artifacts and checkpoints in S3), with one fault injected while they run (issue 34's load).
tests/test_load.py runs a small load in CI; `python -m benchmarks.code.reliability --load` runs the
full one (ten jobs, each fault) for docs/reliability.md.

The load: each model's v1 (no treatment) is registered and promoted first, the root of its chain.
Then every job is submitted at once: per model v2 (KD from `@champion`, promoted), v3 (FD-LM from
the fixed version 1) and v4 (ELODI, m 2, from `@champion`, promoted; its teacher pool is a placement
group), plus the first model's v3 spec a second time (a duplicate submission: one version). Every
job needs one of the cluster's 2 CPUs at a time, so most wait in Ray's queue. A job that fails is
resubmitted once; the rerun resumes from its finished stages (checkpoints in S3).

The audit: every spec registered exactly once (none lost, none duplicated), every version's parent
the one its spec named when the job resolved it (a fixed version, or a version that was champion
while the load ran), every registered NFR equal to `congruent compare` on the stored predictions.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from processes import wait_ready
from ray_nodes import RayCluster, start_ray_cluster, stop_ray_cluster, worker_raylet_pid
from servers import s3_settings, start_mlflow_server, start_postgres, start_seaweedfs

DATA = {"train_limit": 1200, "eval_limit": 600}
TRAIN = {"epochs": 1, "batch_size": 128, "lr": 0.05, "seed": 0}
# student and its one teacher actor fit one node together: the load survives losing a node
RESOURCES = {"replica": {"cpus": 1}, "student": {"cpus": 0.5}, "teacher": {"cpus": 0.5}, "teacher_actors": 1}
PROMOTE = {"max_nfr": 1.0, "max_er_increase": 1.0}  # the gate passes: champion moves during the load
FAULT_DEADLINE_S = 180.0  # the fault comes once a stage runs (on the worker node, for its raylet) …
FAULT_DELAY_S = 10.0  # … and this long after: mid-stage
MLFLOW_DOWN_S = 20.0
JOB_TIMEOUT_S = 1800.0  # a whole load, bounded
FAULTS = ("none", "raylet", "mlflow", "postgres")


def chain_documents(model: str) -> tuple[dict, list[dict]]:
    """(v1, [v2, v3, v4]) of one model's chain (module docstring)."""
    common = {"model": model, "arch": "mlp-small", "data": DATA, "train": TRAIN, "resources": RESOURCES}
    common["storage"] = "s3://checkpoints/runs"
    root = {**common, "version": "v1", "method": {"name": "none"}, "promote": PROMOTE}
    updates = [
        {**common, "version": "v2", "method": {"name": "kd"}, "old": f"{model}@champion", "promote": PROMOTE},
        {**common, "version": "v3", "method": {"name": "fd-lm"}, "old": f"{model}/1"},
        {**common, "version": "v4", "method": {"name": "elodi", "m": 2}, "old": f"{model}@champion"},
    ]
    updates[2]["promote"] = PROMOTE
    return root, updates


@dataclass
class LoadStack:
    """The cluster and the tracking stack the load runs on, and what a fault needs to reach them."""

    root: Path
    cluster: RayCluster
    env: dict  # the MLflow and S3 settings the jobs take (`submit --env-from-here`)
    postgres: object
    mlflow: object
    backend: str
    artifacts: str
    s3_env: dict


@contextlib.contextmanager
def load_stack(root: Path) -> Iterator[LoadStack]:
    """PostgreSQL, SeaweedFS S3 (buckets mlflow and checkpoints), an MLflow server and a two-node
    Ray cluster, all of their own; stopped in reverse order."""
    access_key, secret_key = "load" + secrets.token_hex(6), secrets.token_urlsafe(24)
    with contextlib.ExitStack() as stack:
        pg = start_postgres(root / "postgres")
        stack.callback(pg.stop)
        s3 = start_seaweedfs(root / "seaweedfs", access_key, secret_key, buckets=("mlflow", "checkpoints"))
        stack.callback(s3.stop)
        s3_env = s3_settings(s3.endpoint, access_key, secret_key)
        artifacts = "s3://mlflow/artifacts"
        server = start_mlflow_server(root / "mlflow", pg.uri, artifacts, s3_env)
        cluster = start_ray_cluster(cpus_per_node=1)
        stack.callback(stop_ray_cluster, cluster)
        # the registry's locks are PostgreSQL advisory locks on the store's own database (pg_locks.py)
        env = {"MLFLOW_TRACKING_URI": server.uri, "CONGRUENT_LOCK_DSN": pg.dsn, **s3_env}
        loaded = LoadStack(root, cluster, env, pg, server, pg.uri, artifacts, s3_env)
        stack.callback(lambda: loaded.mlflow.stop())  # the server a fault restarted, if it did
        _wait_for_nodes(cluster.dashboard, 2)
        yield loaded


def _wait_for_nodes(dashboard: str, count: int, timeout_s: float = 90.0) -> None:
    from ray.util.state import list_nodes

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if len([n for n in list_nodes(address=dashboard) if n.state == "ALIVE"]) >= count:
                return
        time.sleep(1)
    raise RuntimeError(f"the cluster at {dashboard} did not reach {count} alive nodes in {timeout_s:.0f} s")


def kill_worker_raylet(stack: LoadStack) -> str:
    pid = worker_raylet_pid(stack.cluster)
    if pid is None:
        raise RuntimeError("no raylet of the worker node to kill")
    subprocess.run(["kill", "-KILL", str(pid)], check=True)
    return f"SIGKILL to the worker node's raylet (pid {pid}); the node stays down"


def stop_mlflow_for_a_while(stack: LoadStack) -> str:
    started = time.monotonic()
    stack.mlflow.stop_signal = signal.SIGKILL  # a crash, not a clean shutdown
    stack.mlflow.stop()
    time.sleep(MLFLOW_DOWN_S)
    stack.mlflow = start_mlflow_server(
        stack.root / "mlflow", stack.backend, stack.artifacts, stack.s3_env, port=stack.mlflow.port
    )
    return f"MLflow server killed, started again on its port after {time.monotonic() - started:.0f} s"


def restart_postgres(stack: LoadStack) -> str:
    started = time.monotonic()
    stack.postgres.restart()
    wait_ready(stack.postgres, stack.postgres.accepting, "connections after the restart")
    return f"PostgreSQL restarted (fast shutdown, start), accepting again after {time.monotonic() - started:.0f} s"


INJECT: dict[str, Callable[[LoadStack], str]] = {
    "raylet": kill_worker_raylet,
    "mlflow": stop_mlflow_for_a_while,
    "postgres": restart_postgres,
}


class ChampionWatch(threading.Thread):
    """Every version `champion` pointed to while the load ran, per model (polled each 0.5 s)."""

    def __init__(self, models: list[str]) -> None:
        super().__init__(daemon=True)
        self.models, self.seen = models, {m: set() for m in models}
        self.done = threading.Event()

    def run(self) -> None:
        from orchestrator.tracking.promotion import champion_of

        while not self.done.is_set():
            for model in self.models:
                with contextlib.suppress(Exception):  # the server may be down (a fault)
                    if (version := champion_of(model)) is not None:
                        self.seen[model].add(version)
            self.done.wait(0.5)


def submit(document: dict, folder: Path, dashboard: str) -> str:
    """The job id of `document` submitted to the cluster with this environment's settings."""
    from orchestrator.jobs import ray_jobs
    from pipelines.spec import load_spec

    path = folder / f"{document['model']}-{document['version']}.yaml"
    path.write_text(yaml.safe_dump(document))
    spec = load_spec(path)
    return ray_jobs.submit(spec, path, dashboard, env_from_here=True)[1]


def wait_for_jobs(
    dashboard: str, job_ids: list[str], timeout_s: float = JOB_TIMEOUT_S, each_poll: Callable[[], None] | None = None
) -> dict[str, object]:
    """Each job's info once all have ended (`each_poll` called between polls); RuntimeError after `timeout_s`."""
    from orchestrator.jobs import ray_jobs

    client = ray_jobs.client(dashboard)
    deadline = time.monotonic() + timeout_s
    while True:
        infos = {}
        for job in job_ids:
            with contextlib.suppress(Exception):  # the dashboard answers slowly under load
                infos[job] = client.get_job_info(job)
        if len(infos) == len(job_ids) and all(info.status.is_terminal() for info in infos.values()):
            return infos
        if time.monotonic() > deadline:
            raise RuntimeError(f"jobs still running after {timeout_s:.0f} s: {job_ids}")
        if each_poll is not None:
            each_poll()
        time.sleep(2)


def _stage_running(stack: LoadStack, on_worker: bool) -> bool:
    """Whether a stage (a task holding a CPU) runs, on the worker node if `on_worker`."""
    from ray.util.state import list_nodes, list_tasks

    with contextlib.suppress(Exception):
        workers = {n.node_id for n in list_nodes(address=stack.cluster.dashboard) if not n.is_head_node}
        for task in list_tasks(address=stack.cluster.dashboard, filters=[("state", "=", "RUNNING")], detail=True):
            if (task.required_resources or {}).get("CPU", 0) > 0 and (not on_worker or task.node_id in workers):
                return True
    return False


def run_load(stack: LoadStack, models: list[str], fault: str, duplicate: bool = True) -> dict:
    """Seed each model's v1, submit the load at once, inject `fault`, rerun failed jobs once, audit.
    Returns the figures (the record docs/reliability.md shows)."""
    from orchestrator.jobs.job_table import job_rows

    folder = stack.root / f"specs-{fault}"
    folder.mkdir(parents=True, exist_ok=True)
    chains = {model: chain_documents(model) for model in models}
    seeds = [submit(chains[m][0], folder, stack.cluster.dashboard) for m in models]
    seeded = wait_for_jobs(stack.cluster.dashboard, seeds)
    bad = {job: info.message for job, info in seeded.items() if info.status.value != "SUCCEEDED"}
    if bad:
        raise RuntimeError(f"the chains' v1 jobs failed: {bad}")

    documents = [doc for m in models for doc in chains[m][1]]
    if duplicate:
        documents.append(chains[models[0]][1][1])  # the first model's v3, submitted twice
    watch = ChampionWatch(models)
    watch.start()
    started = time.time()
    submitted = [(submit(doc, folder, stack.cluster.dashboard), doc) for doc in documents]
    job_ids = [job for job, _ in submitted]
    states_seen = {"waiting": 0, "running": 0}

    def sample_states() -> None:  # what `congruent status` shows
        with contextlib.suppress(Exception):  # the dashboard may be slow to answer under load
            rows = [row for row in job_rows(stack.cluster.dashboard) if row.job in job_ids]
            for state in states_seen:
                states_seen[state] = max(states_seen[state], sum(row.state == state for row in rows))

    deadline = time.monotonic() + FAULT_DEADLINE_S
    while not _stage_running(stack, on_worker=fault == "raylet") and time.monotonic() < deadline:
        sample_states()
        time.sleep(2)
    time.sleep(FAULT_DELAY_S)  # mid-stage: checkpoints written, work left to do
    fault_said = INJECT[fault](stack) if fault != "none" else ""
    infos = wait_for_jobs(stack.cluster.dashboard, job_ids, each_poll=sample_states)
    wall_s = max(info.end_time for info in infos.values()) / 1000 - started
    failed = {
        job: (info.message or "").splitlines()[-1:] for job, info in infos.items() if info.status.value != "SUCCEEDED"
    }
    rows = {row.job: row for row in job_rows(stack.cluster.dashboard)}
    waits = [rows[job].waited_s for job in job_ids if job in rows]

    reruns = [submit(doc, folder, stack.cluster.dashboard) for job, doc in submitted if job in failed]
    rerun_infos = wait_for_jobs(stack.cluster.dashboard, reruns) if reruns else {}
    watch.done.set()
    watch.join(timeout=10)
    audit = audit_registry(models, submitted, watch.seen)
    return {
        "fault": fault,
        "fault_said": fault_said,
        "jobs": len(job_ids),
        "specs": len({(doc["model"], doc["version"]) for _, doc in submitted}),
        "succeeded": len(job_ids) - len(failed),
        "failed": len(failed),
        "failure_reasons": sorted({(message.strip().splitlines() or [""])[-1] for message in failed.values()}),
        "reruns_succeeded": sum(info.status.value == "SUCCEEDED" for info in rerun_infos.values()),
        "wait_p50_s": float(np.percentile(waits, 50)) if waits else None,
        "wait_p95_s": float(np.percentile(waits, 95)) if waits else None,
        "wall_s": wall_s,
        "most_waiting_at_once": states_seen["waiting"],
        "most_running_at_once": states_seen["running"],
        **audit,
    }


def audit_registry(models: list[str], submitted: list[tuple[str, dict]], champions: dict) -> dict:
    """Registered / lost / duplicated specs, parents, and each NFR against `congruent compare`."""
    from mlflow import MlflowClient

    from orchestrator.tracking.registry import ledger_of
    from orchestrator.tracking.version_refs import VersionRef

    client = MlflowClient()
    # a version's spec_hash is of the spec with `old` resolved (a registry reference replaced by the
    # parent's checkpoint), so the load's specs are told apart by model and label (tag `label`)
    by_label: dict[tuple[str, str], list] = {}
    for model in models:
        for mv in client.search_model_versions(f"name='{model}'"):
            by_label.setdefault((model, mv.tags.get("label", "")), []).append(mv)
    specs = {(doc["model"], doc["version"]): doc for _, doc in submitted}
    registered = [by_label.get(key, []) for key in specs]
    wrong_parent, nfr_mismatch, nfr_checked = [], [], 0
    for versions, doc in zip(registered, specs.values()):
        for mv in versions:
            parent = mv.tags.get("parent_version")
            named = doc["old"].split("/")[-1] if "/" in doc["old"] else None
            allowed = {named} if named else champions[doc["model"]]
            if parent not in allowed:
                wrong_parent.append(f"{doc['model']} v{mv.version}: parent {parent}, allowed {sorted(allowed)}")
                continue
            new, old = ledger_of(VersionRef(doc["model"], str(mv.version))), ledger_of(VersionRef(doc["model"], parent))
            compared = compare_cli(old["labels"], old["class_ids"], new["class_ids"])
            nfr_checked += 1
            if f"{compared['pairs'][0]['nfr']:.6f}" != mv.tags["nfr"]:  # the tag holds 6 decimals
                nfr_mismatch.append(f"{doc['model']} v{mv.version}: tag {mv.tags['nfr']}, compare {compared}")
    return {
        "registered": sum(len(v) == 1 for v in registered),
        "lost": sum(len(v) == 0 for v in registered),
        "duplicated": sum(len(v) > 1 for v in registered),
        "wrong_parents": wrong_parent,
        "nfr_checked": nfr_checked,
        "nfr_mismatches": nfr_mismatch,
    }


def compare_cli(labels: np.ndarray, old: np.ndarray, new: np.ndarray) -> dict:
    """`congruent compare --labels … OLD NEW --json` on the two versions' stored predictions."""
    import io
    import tempfile

    from orchestrator.cli import main

    with tempfile.TemporaryDirectory() as tmp:
        paths = [Path(tmp, name) for name in ("labels.npy", "old.npy", "new.npy")]
        for path, array in zip(paths, (labels, old, new)):
            np.save(path, np.asarray(array))
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(["compare", "--labels", *map(str, paths), "--json"])
    if code != 0:
        raise RuntimeError(f"congruent compare exited {code}")
    return json.loads(out.getvalue())
