"""Ray Jobs: the same pipeline as `congruent run`, sent to a cluster's Jobs API (its dashboard address).

The job's runtime_env carries the project (orchestrator/, workers/, pipelines/ and the spec, as its
working_dir); the cluster's image brings torch, Ray and MLflow, and its nodes their own MLflow and
S3 settings (docker-compose.yml's `environment`, the KubeRay secret): the addresses this machine
reaches them at (http://localhost:5000) are not the ones the cluster does (http://mlflow:5000), so
nothing of this environment travels unless asked. With `env_from_here` the job takes this
environment's `MLFLOW_TRACKING_*`, `MLFLOW_S3_*`, `AWS_*` and `CONGRUENT_LOCK_DSN` (a cluster started with a bare
`ray start`, which has none of its own), as a file in its package that the driver and the workers
read (credentials.py), never in its env_vars, which Ray shows to anyone who can list jobs. The
address defaults to `RAY_JOBS_ADDRESS`. Credentials are never arguments.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from orchestrator.host import worker_env
from orchestrator.jobs.credentials import CREDENTIALS_FILE, WORKER_HOOK, write_credentials
from pipelines.spec import SpecError, UpdateSpec

OVERRIDING_ENV = ("RAY_API_SERVER_ADDRESS", "RAY_ADDRESS")  # Ray's clients prefer these to their address
JOB_ENV_PREFIXES = ("MLFLOW_TRACKING_", "MLFLOW_S3_", "AWS_", "CONGRUENT_LOCK_")
PACKAGES = ("orchestrator", "workers", "pipelines")
CANCEL_GRACE_S = 60  # a cancelled job's driver has this long to cancel its stages and end its MLflow run
# Ray Jobs stops a job with SIGTERM and kills it 3 s later; SIGINT with a grace period instead makes
# `congruent cancel` take the driver's Ctrl-C path: stages cancelled, the MLflow run KILLED, nothing
# registered, no partial checkpoint (the job's supervisor reads these from the job's env_vars)
STOP_ENV = {"RAY_JOB_STOP_SIGNAL": "SIGINT", "RAY_JOB_STOP_WAIT_TIME_S": str(CANCEL_GRACE_S)}


def stage_working_dir(spec_path: Path, folder: Path) -> Path:
    """A working_dir holding the project's packages and the spec as spec.yaml."""
    import orchestrator

    source = Path(orchestrator.__file__).resolve().parent.parent
    for package in PACKAGES:
        shutil.copytree(source / package, folder / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copyfile(spec_path, folder / "spec.yaml")
    return folder


def entrypoint(model: str, version: str, spec_hash: str, credentials: bool = False) -> str:
    """The job's shell command. Ray unpacks the working_dir into a cache it may clean up while a
    long driver still runs there (seen here: the driver's cwd vanished before registration), so
    the driver first moves the project and the spec into a directory of its own and runs there:
    one per submission (`mktemp -d`), since the same spec may be submitted again while it runs
    (its stages' checkpoints are shared through `storage`; its version is registered once). With
    `credentials`, the driver's copy of CREDENTIALS_FILE goes along (the driver deletes it)."""
    parent = f"${{TMPDIR:-/tmp}}/congruent-jobs/{model}"
    files = [*PACKAGES, "spec.yaml", *([CREDENTIALS_FILE] if credentials else [])]
    return (
        f'mkdir -p "{parent}" && folder="$(mktemp -d "{parent}/{version}-{spec_hash}-XXXXXX")" '
        f'&& cp -rp {" ".join(files)} "$folder"/ && cd "$folder" '
        "&& python -m orchestrator run spec.yaml --out ."
    )


def ray_token() -> str | None:
    """Ray's token for a cluster with token authentication (`RAY_AUTH_MODE=token`; docker-compose.yml),
    where Ray's own clients look for it: RAY_AUTH_TOKEN, else the file RAY_AUTH_TOKEN_PATH names, else
    ~/.ray/auth_token when this environment says RAY_AUTH_MODE=token. None: send no token."""
    if token := os.environ.get("RAY_AUTH_TOKEN", "").strip():
        return token
    if path := os.environ.get("RAY_AUTH_TOKEN_PATH"):
        try:
            return Path(path).read_text().strip() or None
        except OSError as e:
            raise SpecError(f"RAY_AUTH_TOKEN_PATH: cannot read {path}: {e.strerror}") from None
    default = Path.home() / ".ray" / "auth_token"
    if os.environ.get("RAY_AUTH_MODE", "").lower() == "token" and default.is_file():
        return default.read_text().strip() or None
    return None


def auth_headers() -> dict[str, str]:
    """The Authorization header of Ray's token (ray_token), or none."""
    token = ray_token()
    return {"Authorization": f"Bearer {token}"} if token else {}


def _address(address: str | None) -> str:
    address = address or os.environ.get("RAY_JOBS_ADDRESS")
    if not address:
        raise SpecError("--jobs-address: give the Ray dashboard address (http://HEAD:8265) or set RAY_JOBS_ADDRESS")
    return address


@contextmanager
def _only(address: str) -> Iterator[str]:
    """`address`, with RAY_API_SERVER_ADDRESS and RAY_ADDRESS hidden while a Ray client is made: Ray's
    clients let either variable override the address they are given, which would send a job meant
    for --jobs-address to whatever cluster RAY_ADDRESS names."""
    hidden = {name: os.environ.pop(name) for name in OVERRIDING_ENV if name in os.environ}
    try:
        yield address
    finally:
        os.environ.update(hidden)


def _refused(address: str, error: Exception) -> SpecError:
    """One line for a cluster that refused this client (HTTP 401: no token sent; 403: a wrong one)."""
    if str(error).startswith("Authentication required"):
        return SpecError(
            f"{address} requires Ray's token: set RAY_AUTH_TOKEN (the stack's .env) or RAY_AUTH_TOKEN_PATH"
        )
    return SpecError(f"{address} refused the token of RAY_AUTH_TOKEN / RAY_AUTH_TOKEN_PATH: it is not the cluster's")


def client(address: str | None) -> Any:
    """The Jobs API client of the cluster whose dashboard is at `address` (or RAY_JOBS_ADDRESS),
    sending Ray's token when there is one (ray_token)."""
    from ray.exceptions import AuthenticationError
    from ray.job_submission import JobSubmissionClient

    address = _address(address)
    try:
        with _only(address):
            return JobSubmissionClient(address, headers=auth_headers() or None)
    except AuthenticationError as e:
        raise _refused(address, e) from None


def state_client(address: str | None) -> Any:
    """Ray's State API client of the same cluster, with the same token (list_tasks and its kin send none)."""
    from ray.exceptions import AuthenticationError
    from ray.util.state import StateApiClient

    address = _address(address)
    try:
        with _only(address):
            return StateApiClient(address, headers={"Content-Type": "application/json", **auth_headers()})
    except AuthenticationError as e:
        raise _refused(address, e) from None


def submit(spec: UpdateSpec, spec_path: Path, jobs_address: str | None, env_from_here: bool = False) -> tuple[Any, str]:
    """Send the pipeline of `spec` (read from `spec_path`) as a Ray Job, with this environment's
    MLflow and S3 settings when `env_from_here`; returns (client, job id)."""
    jobs = client(jobs_address)
    runtime_env: dict[str, Any] = {"env_vars": dict(STOP_ENV)}
    if env_from_here:  # a file in the package, never env_vars (credentials.py)
        runtime_env["worker_process_setup_hook"] = WORKER_HOOK
    with tempfile.TemporaryDirectory(prefix="congruent-job-") as tmp:
        working_dir = stage_working_dir(spec_path, Path(tmp))
        if env_from_here:
            write_credentials(working_dir, worker_env(JOB_ENV_PREFIXES))
        job_id = jobs.submit_job(
            entrypoint=entrypoint(spec.model, spec.version, spec.spec_hash, env_from_here),
            runtime_env={"working_dir": str(working_dir), **runtime_env},
            metadata={"model": spec.model, "version": spec.version, "spec_hash": spec.spec_hash},
        )
    return jobs, job_id


def wait_for_end(jobs: Any, job_id: str, timeout_s: float = 60.0) -> Any:
    """The job's info once it has ended (or after `timeout_s` of waiting, past its logs' end)."""
    deadline = time.monotonic() + timeout_s
    info = jobs.get_job_info(job_id)
    while not info.status.is_terminal() and time.monotonic() < deadline:
        time.sleep(1)
        info = jobs.get_job_info(job_id)
    return info


def cancel(jobs: Any, job_id: str) -> tuple[bool, Any]:
    """Stop the job (its driver gets SIGINT: STOP_ENV) and wait for it to end; (whether it was
    still running, its info once ended)."""
    stopped = jobs.stop_job(job_id)
    return stopped, wait_for_end(jobs, job_id, CANCEL_GRACE_S + 30)


async def stream_logs(jobs: Any, job_id: str) -> None:
    """Print the job's logs as they come, until it ends."""
    async for lines in jobs.tail_job_logs(job_id):
        print(lines, end="", flush=True)
