"""Pipelines sent to a cluster as Ray Jobs: what `submit`, `logs`, `cancel` and `status` do, over
orchestrator/jobs/ (the Jobs API client, what travels with a job, the job table). A Jobs API that
cannot be reached, or refuses, is one `JobsUnreachable` whose message is the line to print."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from orchestrator.driver.launch import Refused, load
from orchestrator.jobs.job_table import JobRow
from pipelines.spec import SpecError
from workers.errors import first_line


class JobsUnreachable(RuntimeError):
    """The Ray Jobs API cannot be reached or refused the request; the message says why."""


@contextlib.contextmanager
def _reaching() -> Iterator[None]:
    """Every way the Jobs API (or its State API) fails, as one JobsUnreachable."""
    from ray.util.state.exception import RayStateApiException

    try:
        yield
    except (SpecError, RuntimeError, ConnectionError, RayStateApiException) as e:
        raise JobsUnreachable(first_line(e)) from None


@dataclass(frozen=True)
class Submitted:
    """A pipeline sent as a Ray Job: its model and version, the Jobs API client, the job's id."""

    model: str
    version: str
    client: Any
    job_id: str


def submit(spec_path: str, address: str | None, env_from_here: bool) -> Submitted | Refused:
    """The spec at `spec_path` sent as a Ray Job (it runs `congruent run` on the cluster, which checks
    the rest there), else every problem of the spec, or why the Jobs API cannot take it."""
    from pathlib import Path

    from orchestrator.jobs import ray_jobs

    spec = load(spec_path)
    if isinstance(spec, Refused):
        return spec
    try:
        client, job_id = ray_jobs.submit(spec, Path(spec_path), address, env_from_here)
    except SpecError as e:
        return Refused(e.problems)
    except (ConnectionError, RuntimeError) as e:
        return Refused([f"cannot reach the Ray Jobs API ({first_line(e)})"])
    return Submitted(spec.model, spec.version, client, job_id)


def follow(submitted: Submitted) -> Any:
    """Stream the job's logs until it ends; its info once ended."""
    import asyncio

    from orchestrator.jobs import ray_jobs

    asyncio.run(ray_jobs.stream_logs(submitted.client, submitted.job_id))
    return ray_jobs.wait_for_end(submitted.client, submitted.job_id)


def job_logs(address: str | None, job_id: str, stream: bool) -> str:
    """The job's logs so far; with `stream`, printed as they come until it ends (then "")."""
    import asyncio

    from orchestrator.jobs import ray_jobs

    with _reaching():
        client = ray_jobs.client(address)
        if stream:
            asyncio.run(ray_jobs.stream_logs(client, job_id))
            return ""
        return str(client.get_job_logs(job_id))


@dataclass(frozen=True)
class Cancelled:
    """A job stopped: whether it was still running, its info once ended, its logs."""

    was_running: bool
    info: Any
    logs: str


def cancel(address: str | None, job_id: str) -> Cancelled:
    """Stop the job (its driver gets SIGINT) and wait for it to end."""
    from orchestrator.jobs import ray_jobs

    with _reaching():
        client = ray_jobs.client(address)
        was_running, info = ray_jobs.cancel(client, job_id)
        return Cancelled(was_running, info, client.get_job_logs(job_id))


def job_info(address: str | None, job_id: str) -> Any:
    """One job's info: status, message, metadata (model, version)."""
    from orchestrator.jobs import ray_jobs

    with _reaching():
        return ray_jobs.client(address).get_job_info(job_id)


def every_job(address: str | None) -> list[JobRow]:
    """Every job on the cluster, with how long each waited for resources."""
    from orchestrator.jobs.job_table import job_rows

    with _reaching():
        return job_rows(address)
