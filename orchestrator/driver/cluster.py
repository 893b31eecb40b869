"""The Ray edge: joining or starting a cluster, what a stage may ask of it, and running a stage body
as a Ray task that notes the node it ran on."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
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
        quiet_local_auth()
        ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False, logging_level="WARNING",
                 runtime_env=runtime_env)


def quiet_local_auth() -> None:
    """The embedded cluster keeps Ray's token authentication (what Ray picks for a new local cluster
    when RAY_AUTH_MODE is unset), chosen explicitly: left unset, Ray picks it and prints a warning
    about it at every start. A RAY_AUTH_MODE of the environment wins."""
    if "RAY_AUTH_MODE" in os.environ:
        return
    os.environ["RAY_AUTH_MODE"] = "token"
    from ray._raylet import Config

    Config.initialize("")  # Ray reads RAY_AUTH_MODE once, at import; it refreshes it the same way itself


def local_capacity(spec: UpdateSpec) -> dict[str, float]:
    """What the embedded local Ray will hold, known before it starts: this machine's CPUs (`connect`
    starts it with all of them) and GPUs (counted only when the spec asks for one)."""
    r = spec.resources
    gpus = 0
    if any(w.gpus > 0 for w in (r.replica, r.student, r.teacher)):
        import torch

        gpus = torch.cuda.device_count()
    return {"CPU": float(os.cpu_count() or 1), "GPU": float(gpus)}


def check_cluster(spec: UpdateSpec, ray_address: str | None, replicas: bool, student: bool, pool_actors: int
                  ) -> None:
    """`check_resources` against the cluster the command runs on, before any Ray work: an existing
    cluster (`ray_address`, RAY_ADDRESS, or one this process already joined) is joined and asked;
    the embedded local Ray is not started here, this machine's cores answer for it. SpecError
    (one line) when a stage could never run."""
    import ray

    if ray_address or os.environ.get("RAY_ADDRESS") or ray.is_initialized():
        try:
            connect(ray_address)
        except ConnectionError as e:
            address = ray_address or os.environ.get("RAY_ADDRESS")
            raise SpecError(f"cannot join the Ray cluster at {address} ({(str(e).splitlines() or ['no answer'])[0]})"
                            ) from None
        capacity = ray.cluster_resources()
    else:
        capacity = local_capacity(spec)
    check_resources(spec, capacity, replicas, student, pool_actors)


def check_resources(spec: UpdateSpec, capacity: Mapping[str, float], replicas: bool, student: bool,
                    pool_actors: int) -> None:
    """SpecError when a cluster of `capacity` ({"CPU": n, "GPU": n}) can never hold a stage the
    method runs (Ray would wait forever): a replica (when `replicas`), or the student (when
    `student`) together with the `pool_actors` teacher actors it is reserved with."""
    cpus, gpus = capacity.get("CPU", 0.0), capacity.get("GPU", 0.0)
    r = spec.resources
    if replicas and (r.replica.cpus > cpus or r.replica.gpus > gpus):
        raise SpecError(f"resources.replica: asks {r.replica.cpus} CPU / {r.replica.gpus} GPU, cluster has {cpus} / {gpus}")
    distill_cpus = (r.student.cpus if student else 0.0) + pool_actors * r.teacher.cpus
    distill_gpus = (r.student.gpus if student else 0.0) + pool_actors * r.teacher.gpus
    if distill_cpus > cpus or distill_gpus > gpus:
        what = " + ".join((["student"] if student else []) + ([f"{pool_actors} teacher actors"] if pool_actors else []))
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
    """Run a stage body in a Ray worker; a record with a `node_id` field learns which node ran it."""
    import ray

    record = function(*args)
    if hasattr(record, "node_id"):
        record.node_id = ray.get_runtime_context().get_node_id()
    return record
