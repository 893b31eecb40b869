"""The Ray edge: joining or starting a cluster, what a stage may ask of it, and running a stage body
as a Ray task that notes the node it ran on."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from pipelines.spec import SpecError, UpdateSpec, WorkerResources

FORWARDED_ENV_PREFIXES = ("AWS_", "MLFLOW_S3_")  # what workers need for S3 storage, never logged


def worker_env(prefixes: tuple[str, ...] = FORWARDED_ENV_PREFIXES) -> dict[str, str]:
    """Environment the driver passes to its Ray workers (storage endpoint and credentials)."""
    return {k: v for k, v in os.environ.items() if k.startswith(prefixes)}


def connect(ray_address: str | None) -> None:
    """Join the cluster whose GCS is at `ray_address` (or RAY_ADDRESS); without one, start Ray in
    this process. The job's workers get the S3 settings of this environment through the runtime_env."""
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray_address = ray_address or os.environ.get("RAY_ADDRESS")
    if ray.is_initialized():
        return
    # a driver submitted as a Ray Job already gives its workers the job's runtime_env
    runtime_env = None if "RAY_JOB_CONFIG_JSON_ENV_VAR" in os.environ else {"env_vars": worker_env()}
    if ray_address:
        ray.init(address=ray_address, logging_level="WARNING", runtime_env=runtime_env)
    else:
        ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False, logging_level="WARNING",
                 runtime_env=runtime_env)


def check_resources(spec: UpdateSpec, needs_student: bool, pool_actors: int) -> None:
    """SpecError when the cluster can never hold a stage (Ray would wait forever): a replica, or the
    student together with the `pool_actors` teacher actors it is reserved with."""
    import ray

    total = ray.cluster_resources()
    cpus, gpus = total.get("CPU", 0.0), total.get("GPU", 0.0)
    r = spec.resources
    if r.replica.cpus > cpus or r.replica.gpus > gpus:
        raise SpecError(f"resources.replica: asks {r.replica.cpus} CPU / {r.replica.gpus} GPU, cluster has {cpus} / {gpus}")
    distill_cpus = (r.student.cpus if needs_student else 0.0) + pool_actors * r.teacher.cpus
    distill_gpus = (r.student.gpus if needs_student else 0.0) + pool_actors * r.teacher.gpus
    if distill_cpus > cpus or distill_gpus > gpus:
        what = " + ".join((["student"] if needs_student else []) + ([f"{pool_actors} teacher actors"] if pool_actors else []))
        raise SpecError(f"resources: {what} need {distill_cpus} CPU / {distill_gpus} GPU at once, "
                        f"cluster has {cpus} / {gpus}")


def bundle(resources: WorkerResources) -> dict[str, float]:
    """A placement-group bundle for one task or actor."""
    return {name: value for name, value in (("CPU", resources.cpus), ("GPU", resources.gpus)) if value > 0}


def threads(cpus: float) -> int:
    """torch threads of a worker holding `cpus` CPUs (never more threads than the cores it holds)."""
    return max(1, int(cpus))


def device(gpus: float) -> str:
    return "cuda" if gpus > 0 else "cpu"


def on_node(function: Callable[..., Any], *args: Any) -> Any:
    """Run a stage body in a Ray worker; the records it returns (one, or a list) with a `node_id`
    field learn which node ran them."""
    import ray

    result = function(*args)
    for record in result if isinstance(result, list) else [result]:
        if hasattr(record, "node_id"):
            record.node_id = ray.get_runtime_context().get_node_id()
    return result
