"""The Ray edge: joining or starting a cluster, what a stage may ask of it, and running a stage body
as a Ray task that notes the node it ran on."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from typing import Any

from orchestrator.host import WORKER_ALLOCATORS, worker_env
from orchestrator.planning.resources import check_placement, check_resources, local_capacity
from pipelines.spec import SpecError, UpdateSpec
from workers.errors import first_line


def connect(ray_address: str | None, dashboard: bool = False, worker_logs: bool = True) -> None:
    """Join the cluster whose GCS is at `ray_address` (or RAY_ADDRESS); without one, start Ray in
    this process — with its dashboard when `dashboard` (Ray Train's clean-up watches its runs
    through the State API it serves). The job's workers get this environment's S3 settings through
    the runtime_env. `worker_logs` False keeps the workers' output in Ray's log files instead of
    this terminal."""
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray_address = ray_address or os.environ.get("RAY_ADDRESS")
    if ray.is_initialized():
        return
    # a driver submitted as a Ray Job already gives its workers the job's runtime_env
    runtime_env = None if "RAY_JOB_CONFIG_JSON_ENV_VAR" in os.environ else {"env_vars": worker_env()}
    if runtime_env is not None:
        for name, value in WORKER_ALLOCATORS.items():
            runtime_env["env_vars"].setdefault(name, os.environ.get(name, value))
    if ray_address:
        ray.init(address=ray_address, logging_level=logging.WARNING, runtime_env=runtime_env, log_to_driver=worker_logs)
    else:
        quiet_local_auth()
        ray.init(
            address="local",
            num_cpus=os.cpu_count(),
            object_store_memory=object_store_bytes(),
            include_dashboard=dashboard,
            logging_level=logging.WARNING,
            runtime_env=runtime_env,
            log_to_driver=worker_logs,
        )


def mute_workers() -> None:
    """Stop printing the workers' output in this terminal (Ray's log files keep it), from Ctrl-C on:
    the stages are being cancelled, and what a dying worker prints (Ray's own crash dump when a
    cancelled task aborts) would bury the command's one line. Nothing to do before Ray is imported."""
    worker = sys.modules.get("ray._private.worker")
    if worker is None:
        return
    worker.global_worker_stdstream_dispatcher.remove_handler("ray_print_logs")
    worker.stdout_deduplicator.flush()  # what it held back is dropped, not printed at disconnect
    worker.stderr_deduplicator.flush()


def object_store_bytes() -> int | None:
    """The embedded Ray's object store under a cgroup memory limit: Ray's default share (30 %) of
    that limit, not of the machine's memory, which Ray reads from outside the cgroup. None (Ray's
    own default) without a limit."""
    from ray._private.ray_constants import DEFAULT_OBJECT_STORE_MEMORY_PROPORTION, OBJECT_STORE_MINIMUM_MEMORY_BYTES

    from orchestrator.host import memory_limit

    limit = memory_limit()
    if limit is None:
        return None
    return max(OBJECT_STORE_MINIMUM_MEMORY_BYTES, int(limit * DEFAULT_OBJECT_STORE_MEMORY_PROPORTION))


def quiet_local_auth() -> None:
    """The embedded cluster keeps Ray's token authentication (what Ray picks for a new local cluster
    when RAY_AUTH_MODE is unset), chosen explicitly: left unset, Ray picks it and prints a warning
    about it at every start. A RAY_AUTH_MODE of the environment wins."""
    if "RAY_AUTH_MODE" in os.environ:
        return
    os.environ["RAY_AUTH_MODE"] = "token"
    from ray._raylet import Config  # type: ignore[attr-defined]  # ray's _raylet.pyi omits the Cython class

    Config.initialize("")  # Ray reads RAY_AUTH_MODE once, at import; it refreshes it the same way itself


def check_cluster(spec: UpdateSpec, ray_address: str | None, replicas: bool, student: bool, pool_actors: int) -> None:
    """`check_resources` against the cluster the command runs on, before any Ray work: an existing
    cluster (`ray_address`, RAY_ADDRESS, or one this process already joined) is joined and asked;
    the embedded local Ray is not started here, this machine's cores answer for it. SpecError
    (one line) when a stage could never run."""
    joined = "ray" in sys.modules and sys.modules["ray"].is_initialized()  # no Ray imported: none joined
    if ray_address or os.environ.get("RAY_ADDRESS") or joined:
        import ray

        try:
            connect(ray_address)
        except ConnectionError as e:
            address = ray_address or os.environ.get("RAY_ADDRESS")
            raise SpecError(f"cannot join the Ray cluster at {address} ({first_line(e)})") from None
        capacity = ray.cluster_resources()
        nodes = node_capacities()
    else:
        capacity = local_capacity(spec)
        nodes = [(capacity["CPU"], capacity["GPU"])]
    check_resources(spec, capacity, replicas, student, pool_actors)
    check_placement(spec, nodes, replicas, student, pool_actors)


def node_capacities() -> list[tuple[float, float]]:
    """(CPU, GPU) of each alive node of the connected cluster."""
    import ray

    return [(n["Resources"].get("CPU", 0.0), n["Resources"].get("GPU", 0.0)) for n in ray.nodes() if n["Alive"]]


def on_node(function: Callable[..., Any], *args: Any) -> Any:
    """Run a stage body in a Ray worker; the records it returns (one, or a list) with a `node_id`
    field learn which node ran them."""
    import ray

    result = function(*args)
    for record in result if isinstance(result, list) else [result]:
        if hasattr(record, "node_id"):
            record.node_id = ray.get_runtime_context().get_node_id()
    return result
