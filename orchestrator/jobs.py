"""`congruent submit | status | logs`: the same pipeline as `congruent run`, as a Ray Job.

    congruent submit spec.yaml --address http://HEAD:8265 [--wait]
    congruent status JOB_ID --address http://HEAD:8265
    congruent logs JOB_ID --address http://HEAD:8265 [--follow]

The job's runtime_env carries the project (orchestrator/, workers/, pipelines/ and the spec, as its
working_dir) and the MLflow and S3 settings of this environment (`MLFLOW_TRACKING_*`, `AWS_*`,
`MLFLOW_S3_*`); the cluster's image brings torch, Ray and MLflow. `--address` defaults to
`RAY_JOBS_ADDRESS`. Credentials travel as environment variables only, never as arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from pipelines.spec import SpecError, load_spec

JOB_ENV_PREFIXES = ("MLFLOW_TRACKING_", "MLFLOW_S3_", "AWS_")
PACKAGES = ("orchestrator", "workers", "pipelines")


def stage_working_dir(spec_path: Path, folder: Path) -> Path:
    """A working_dir holding the project's packages and the spec as spec.yaml."""
    import orchestrator

    source = Path(orchestrator.__file__).resolve().parent.parent
    for package in PACKAGES:
        shutil.copytree(source / package, folder / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copyfile(spec_path, folder / "spec.yaml")
    return folder


def entrypoint(model: str, version: str, spec_hash: str) -> str:
    """The job's shell command. Ray unpacks the working_dir into a cache it may clean up while a
    long driver still runs there (seen here: the driver's cwd vanished before registration), so
    the driver first moves the project and the spec into a directory of its own and runs there."""
    folder = f"${{TMPDIR:-/tmp}}/congruent-jobs/{model}/{version}-{spec_hash}"
    return (f'mkdir -p "{folder}" && cp -r {" ".join(PACKAGES)} spec.yaml "{folder}"/ && cd "{folder}" '
            "&& python -m orchestrator run spec.yaml --out .")


def _client(address: str | None):
    from ray.job_submission import JobSubmissionClient

    address = address or os.environ.get("RAY_JOBS_ADDRESS")
    if not address:
        raise SpecError("--address: give the Ray dashboard address (http://HEAD:8265) or set RAY_JOBS_ADDRESS")
    return JobSubmissionClient(address)


def submit(args: argparse.Namespace) -> int:
    from orchestrator.run import worker_env

    try:
        spec = load_spec(args.spec)
        client = _client(args.address)
    except SpecError as e:
        print(f"congruent submit: error: {e}", file=sys.stderr)
        return 2
    except (ConnectionError, RuntimeError) as e:
        print(f"congruent submit: error: cannot reach the Ray Jobs API ({str(e).splitlines()[0]})", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="congruent-job-") as tmp:
        working_dir = stage_working_dir(Path(args.spec), Path(tmp))
        job_id = client.submit_job(
            entrypoint=entrypoint(spec.model, spec.version, spec.spec_hash),
            runtime_env={"working_dir": str(working_dir), "env_vars": worker_env(JOB_ENV_PREFIXES)},
            metadata={"model": spec.model, "version": spec.version, "spec_hash": spec.spec_hash},
        )
    print(f"submitted {spec.model} {spec.version} as Ray job {job_id}")
    if not args.wait:
        print(f"follow it with: congruent logs {job_id} --follow --address {client.get_address()}")
        return 0
    asyncio.run(_stream(client, job_id))
    return _final_status(client, job_id)


def _final_status(client, job_id: str) -> int:
    from ray.job_submission import JobStatus

    deadline = time.monotonic() + 60
    info = client.get_job_info(job_id)
    while not info.status.is_terminal() and time.monotonic() < deadline:
        time.sleep(1)
        info = client.get_job_info(job_id)
    print(f"job {job_id}: {info.status.value}" + (f" ({info.message})" if info.message else ""))
    return 0 if info.status == JobStatus.SUCCEEDED else 1


async def _stream(client, job_id: str) -> None:
    async for lines in client.tail_job_logs(job_id):
        print(lines, end="", flush=True)


def _show_status(client, args: argparse.Namespace) -> None:
    info = client.get_job_info(args.job_id)
    meta = info.metadata or {}
    print(f"{args.job_id}: {info.status.value}  {meta.get('model', '')} {meta.get('version', '')}".rstrip())
    if info.message:
        print(info.message)


def _show_logs(client, args: argparse.Namespace) -> None:
    if args.follow:
        asyncio.run(_stream(client, args.job_id))
    else:
        print(client.get_job_logs(args.job_id), end="")


def _job_command(name: str, show: Callable[..., None]) -> Callable[[argparse.Namespace], int]:
    """A `congruent status|logs` command: one line and exit 2 when the job or cluster is not there."""

    def command(args: argparse.Namespace) -> int:
        try:
            show(_client(args.address), args)
        except (SpecError, RuntimeError, ConnectionError) as e:
            print(f"congruent {name}: error: {str(e).splitlines()[0]}", file=sys.stderr)
            return 2
        return 0

    return command


status = _job_command("status", _show_status)
logs = _job_command("logs", _show_logs)


def register(subparsers: argparse._SubParsersAction) -> None:
    address_help = "Ray dashboard / Jobs API address, http://HEAD:8265 (default: RAY_JOBS_ADDRESS)"
    p = subparsers.add_parser("submit", help="run an update pipeline on a Ray cluster as a Ray Job")
    p.add_argument("spec", metavar="SPEC.yaml")
    p.add_argument("--address", default=None, help=address_help)
    p.add_argument("--wait", action="store_true", help="stream the job's logs and exit with its outcome")
    p.set_defaults(func=submit)
    p = subparsers.add_parser("status", help="the status of a submitted pipeline job")
    p.add_argument("job_id")
    p.add_argument("--address", default=None, help=address_help)
    p.set_defaults(func=status)
    p = subparsers.add_parser("logs", help="the logs of a submitted pipeline job")
    p.add_argument("job_id")
    p.add_argument("--address", default=None, help=address_help)
    p.add_argument("--follow", action="store_true", help="stream until the job ends")
    p.set_defaults(func=logs)
