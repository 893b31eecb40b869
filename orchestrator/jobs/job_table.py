"""Every pipeline job on a cluster, and how long each waited for resources: `congruent status`.

A job waits while one of its stages is queued for a node with free resources (Ray's task state
PENDING_NODE_ASSIGNMENT, from each task's state events) or its teacher pool's placement group is
pending (from the group's stats). A job's wait is the length of the union of those stretches: the
time during which at least one of its stages was queued. Both come from Ray's state API on the
dashboard address (the same one the Jobs API uses); Ray keeps the events of finished jobs too, up
to its task-event limit (RAY_task_events_max_num_task_in_gcs).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

QUEUED = "PENDING_NODE_ASSIGNMENT"  # a task whose resources no node has free yet
TASK_LIMIT = 10_000  # tasks and groups read from the state API at once (its default maximum)


def queued_stretches(events: Sequence[dict], now_ms: float) -> list[tuple[float, float]]:
    """[start, end) in ms of each stretch a task spent queued (state QUEUED until its next event);
    a stretch with no next event is still open and ends at `now_ms`."""
    stretches = []
    for i, event in enumerate(events):
        if event["state"] == QUEUED:
            end = float(events[i + 1]["created_ms"]) if i + 1 < len(events) else now_ms
            stretches.append((float(event["created_ms"]), end))
    return stretches


def group_stretch(state: str, stats: dict, now_ms: float) -> tuple[float, float] | None:
    """[start, end) in ms that a placement group waited for its bundles: from the request to its
    creation, or to `now_ms` while it is PENDING."""
    if "creation_request_received_ns" not in stats:
        return None
    start = int(stats["creation_request_received_ns"]) / 1e6
    if state == "PENDING":
        return start, now_ms
    if state == "CREATED" or "end_to_end_creation_latency_us" in stats:
        return start, start + int(stats.get("end_to_end_creation_latency_us", 0)) / 1e3
    return None


def covered_seconds(stretches: Iterable[tuple[float, float]]) -> float:
    """Length in seconds of the union of [start, end) stretches in ms (overlaps counted once)."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(stretches):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total / 1000


@dataclass(frozen=True)
class JobRow:
    job: str  # the submission id `congruent submit` printed
    model: str
    version: str
    state: str  # waiting | running | SUCCEEDED | FAILED | STOPPED
    waited_s: float  # union of its stages' queued stretches (module docstring)
    ran_s: float | None  # from submission to its end (None: not ended)
    submitted_ms: int
    message: str


def _holds_resources(task: Any) -> bool:
    needs = task.required_resources or {}
    return needs.get("CPU", 0) > 0 or needs.get("GPU", 0) > 0


def job_state(status: str, queued_now: bool, running_now: bool) -> str:
    """waiting (not started, or a stage queued and none running), running, or Ray's final status."""
    if status == "PENDING" or (status == "RUNNING" and queued_now and not running_now):
        return "waiting"
    return "running" if status == "RUNNING" else status


def job_rows(address: str | None) -> list[JobRow]:
    """The submitted jobs of the cluster at `address` (its dashboard; default RAY_JOBS_ADDRESS), oldest first."""
    from ray.util.state.common import ListApiOptions, StateResource

    from orchestrator.jobs import ray_jobs

    client = ray_jobs.client(address)
    jobs = client.list_jobs()
    state = ray_jobs.state_client(client.get_address())

    def listed(resource: StateResource) -> list[Any]:
        options = ListApiOptions(detail=True, limit=TASK_LIMIT)
        return state.list(resource, options=options, raise_on_missing_output=False)

    now_ms = time.time() * 1000
    stretches: dict[str, list[tuple[float, float]]] = defaultdict(list)
    queued_now: set[str] = set()
    running_now: set[str] = set()
    for task in listed(StateResource.TASKS):
        if not _holds_resources(task):
            continue
        stretches[task.job_id] += queued_stretches(task.events or [], now_ms)
        if task.state == QUEUED:
            queued_now.add(task.job_id)
        elif task.state == "RUNNING":
            running_now.add(task.job_id)
    for group in listed(StateResource.PLACEMENT_GROUPS):
        stretch = group_stretch(group.state, group.stats or {}, now_ms)
        if stretch is not None:
            stretches[group.creator_job_id].append(stretch)
        if group.state == "PENDING":
            queued_now.add(group.creator_job_id)
    rows = []
    for job in sorted(jobs, key=lambda j: j.start_time or 0):
        if job.submission_id is None:  # a driver attached with ray.init, not a submitted job
            continue
        meta, status, ray_id = job.metadata or {}, job.status.value, job.job_id or ""
        ran = (job.end_time - job.start_time) / 1000 if job.end_time and job.start_time else None
        waited = covered_seconds(stretches.get(ray_id, []))
        if status == "PENDING" and job.start_time:  # its driver itself has not started
            waited = max(waited, (now_ms - job.start_time) / 1000)
        rows.append(
            JobRow(
                job.submission_id,
                meta.get("model", ""),
                meta.get("version", ""),
                job_state(status, ray_id in queued_now, ray_id in running_now),
                waited,
                ran,
                int(job.start_time or 0),
                (job.message or "").splitlines()[0] if job.message else "",
            )
        )
    return rows
