"""A cgroup v1 memory cgroup for the benchmarks that run a command inside a memory limit (root only):
streaming's memory_cap and token_cache_cap, serving's predict_scale."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

CGROUPS = Path("/sys/fs/cgroup/memory")


class Cgroup:
    """A cgroup v1 memory cgroup: created with an optional limit; its usage sampled every second."""

    def __init__(self, name: str, limit: int | None):
        self.path = CGROUPS / name
        self.remove()
        self.path.mkdir()
        if limit is not None:
            (self.path / "memory.limit_in_bytes").write_text(str(limit))
        self.samples: list[tuple[float, int, int]] = []  # (seconds, usage, rss + shmem)
        self._stop = threading.Event()
        self._started = time.perf_counter()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _read(self, name: str) -> str:
        return (self.path / name).read_text()

    def stat(self) -> dict[str, int]:
        return {k: int(v) for k, v in (line.split() for line in self._read("memory.stat").splitlines())}

    def _sample(self) -> None:
        while not self._stop.wait(1.0):
            try:
                stat = self.stat()
                usage = int(self._read("memory.usage_in_bytes"))
            except OSError:
                return
            self.samples.append((time.perf_counter() - self._started, usage, stat["rss"] + stat["shmem"]))

    def run(self, argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
        """`argv` started inside the cgroup (its children stay inside)."""
        enter = f'echo $$ > {self.path}/cgroup.procs && exec "$@"'
        return subprocess.run(["bash", "-c", enter, "bash", *argv], cwd=cwd, env=env, capture_output=True, text=True)

    def figures(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join()
        oom = dict(line.split() for line in self._read("memory.oom_control").splitlines())
        return {
            "peak_bytes": int(self._read("memory.max_usage_in_bytes")),
            "peak_resident_bytes": max((s[2] for s in self.samples), default=0),
            "limit_hits": int(self._read("memory.failcnt")),
            "oom_kills": int(oom.get("oom_kill", 0)),
            "samples": self.samples,
        }

    def remove(self) -> None:
        """Kill what is left inside (Ray's processes outlive a failed driver) and remove the cgroup."""
        if not self.path.exists():
            return
        for _ in range(20):
            pids = [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.5)
        self.path.rmdir()
