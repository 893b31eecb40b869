"""What this host gives the processes Congruent starts, read by the driver, the planning and the data
plane alike: the environment handed to Ray workers (storage endpoint and credentials, allocator
settings) and the memory this process may use (cgroup v1 or v2 limits, MemAvailable). Imports nothing
of the project's but the standard library."""

from __future__ import annotations

import os
from pathlib import Path

FORWARDED_ENV_PREFIXES = ("AWS_", "MLFLOW_S3_")  # what workers need for S3 storage, never logged
CREDENTIALS_FROM_FILE = "CONGRUENT_CREDENTIALS_FROM_FILE"  # set where they came from a job's file (jobs/credentials.py)
# How a worker's memory allocators keep what they free, where a worker's reading threads hand
# batches (Arrow's shuffle buffer, numpy) to its training thread: glibc with 2 arenas instead of 8
# per core, and Arrow through glibc instead of its own mimalloc pool, which keeps freed pages. With
# the defaults, a capped run's replicas grew past their limit (docs/benchmarks/streaming.md "Data larger than
# its memory limit"). The environment's own values win.
WORKER_ALLOCATORS = {"MALLOC_ARENA_MAX": "2", "ARROW_DEFAULT_MEMORY_POOL": "system"}


def worker_env(prefixes: tuple[str, ...] = FORWARDED_ENV_PREFIXES) -> dict[str, str]:
    """Environment the driver passes to its Ray workers (storage endpoint and credentials)."""
    return {k: v for k, v in os.environ.items() if k.startswith(prefixes)}


def own_cgroups(
    membership: Path = Path("/proc/self/cgroup"), mount: Path = Path("/sys/fs/cgroup")
) -> list[tuple[Path, str, str]]:
    """The memory cgroups this process is charged to, innermost first, with their limit and usage
    file names (cgroup v1's memory controller, or v2's unified hierarchy): the limits of every
    ancestor apply."""
    try:
        lines = membership.read_text().splitlines()
    except OSError:
        return []
    found: list[tuple[Path, str, str]] = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            root, names = mount / "memory", ("memory.limit_in_bytes", "memory.usage_in_bytes")
        elif controllers == "" and (mount / "cgroup.controllers").exists():
            root, names = mount, ("memory.max", "memory.current")
        else:
            continue
        here = root / path.lstrip("/")
        while True:
            found.append((here, *names))
            if here == root:
                break
            here = here.parent
    return found


def memory_limit(cgroups: list[tuple[Path, str, str]] | None = None) -> int | None:
    """The tightest memory limit of this process's cgroups (`own_cgroups`), None when there is none."""
    limits = []
    for folder, limit_file, _ in own_cgroups() if cgroups is None else cgroups:
        try:
            limit = (folder / limit_file).read_text().strip()
        except OSError:
            continue
        if limit.isdigit() and int(limit) < 1 << 60:
            limits.append(int(limit))
    return min(limits, default=None)


def available_memory(cgroups: list[tuple[Path, str, str]] | None = None) -> int:
    """Bytes this process may still use: MemAvailable, or less under a cgroup (v1 or v2) limit
    (`own_cgroups`): the least of every ancestor's limit − usage."""
    available = 1 << 62
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
    except OSError:
        pass
    for folder, limit_file, usage_file in own_cgroups() if cgroups is None else cgroups:
        try:
            limit, usage = (folder / limit_file).read_text().strip(), (folder / usage_file).read_text().strip()
        except OSError:
            continue
        if limit.isdigit() and int(limit) < 1 << 60:
            available = min(available, max(0, int(limit) - int(usage)))
    return available
