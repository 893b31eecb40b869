"""A real two-node Ray cluster on 127.0.0.1 (`ray start` head with the dashboard and Jobs API, plus
a worker node), in a Ray directory of its own, stopped by pid: the session fixture `ray_cluster`
(conftest.py) and the load harness (load_harness.py) each start one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from processes import free_port

RAY_TEST_ENV = {
    "RAY_AUTH_MODE": "disabled",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_DEDUP_LOGS": "0",
    "RAY_enable_worker_prestart": "0",
    # Each node's dashboard agent samples every process of its node (psutil) every 5 s by default, for
    # dashboard graphs no test reads: every 60 s here (2 clusters x 2 nodes did ~60 s of CPU a suite)
    "REPORTER_UPDATE_INTERVAL_MS": "60000",
}
START_TIMEOUT_S = 120


@dataclass(frozen=True)
class RayCluster:
    address: str  # GCS address, for `ray.init` and `congruent run --ray-address`
    dashboard: str  # http://127.0.0.1:PORT, for the Jobs API (`congruent submit --jobs-address`)
    ray_dir: str  # every process of the cluster mentions it
    worker_node_manager_port: int  # names the worker node's raylet (a fault kills it)


def start_ray_cluster(cpus_per_node: int = 1, workers: int = 1, node_env: dict[str, str] | None = None) -> RayCluster:
    """Head and `workers` worker nodes (0 or 1) started (each node's agents on free ports: never clash
    with another Ray here), with `node_env` added to the nodes' environment only (e.g. Ray's token
    authentication); `stop_ray_cluster` stops them. The caller waits for the worker node to join."""
    os.environ.update(RAY_TEST_ENV)
    ray_cli = str(Path(sys.executable).with_name("ray"))
    port, dashboard_port, worker_port = free_port(), free_port(), free_port()
    ray_dir = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # short: Ray's socket paths must stay < 108 bytes
    common = ["--num-cpus", str(cpus_per_node), "--disable-usage-stats"]

    def node_ports() -> list[str]:
        return [
            *("--dashboard-agent-listen-port", str(free_port())),
            *("--dashboard-agent-grpc-port", str(free_port())),
            *("--runtime-env-agent-port", str(free_port())),
            *("--metrics-export-port", str(free_port())),
        ]

    address = f"127.0.0.1:{port}"
    # as from an activated venv: a Ray Job's `python` entrypoint is this venv's python
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        **(node_env or {}),
    }
    cluster = RayCluster(address, f"http://127.0.0.1:{dashboard_port}", ray_dir, worker_port)
    try:
        head = [*("--head", "--node-ip-address", "127.0.0.1", "--port", str(port), "--include-dashboard", "true")]
        head += [*("--dashboard-host", "127.0.0.1", "--dashboard-port", str(dashboard_port), "--temp-dir", ray_dir)]
        worker = ["--address", address, "--node-ip-address", "127.0.0.1", "--node-manager-port", str(worker_port)]
        # one log monitor per machine, as Ray's `ray start --help` asks: the head's already reads every
        # log file under ray_dir (both nodes write there), and a second one polled them again (~40 s CPU)
        worker += ["--include-log-monitor", "false"]
        for args in (head, worker)[: 1 + workers]:
            run = [ray_cli, "start", *args, *common, *node_ports()]
            subprocess.run(run, check=True, capture_output=True, timeout=START_TIMEOUT_S, env=env)
    except BaseException:
        stop_ray_cluster(cluster)
        raise
    return cluster


def worker_raylet_pid(cluster: RayCluster) -> int | None:
    """The pid of the worker node's raylet, or None."""
    flag = f"--node_manager_port={cluster.worker_node_manager_port}"
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit():
                argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
                if argv and argv[0].endswith("raylet") and flag in argv:
                    return int(entry.name)
        except OSError:
            pass
    return None


def stop_ray_cluster(cluster: RayCluster) -> None:
    stop_processes_mentioning(cluster.ray_dir)


def stop_processes_mentioning(marker: str, timeout: float = 5.0) -> None:
    """SIGTERM, then SIGKILL, every process whose command line or open files mention `marker`
    (this cluster's Ray directory): only our own cluster is stopped, never another one. A cluster
    that stops is not waited for: the GCS server and the dashboard ignore SIGTERM for over 30 s
    (measured), so after `timeout` SIGKILL ends them."""

    def mentions(entry: Path) -> bool:
        if marker in (entry / "cmdline").read_bytes().decode(errors="replace"):
            return True  # gcs_server, raylets, monitors
        return any(marker in os.readlink(fd) for fd in (entry / "fd").iterdir())  # renamed ray:: agents

    def matching() -> list[int]:
        pids = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and int(entry.name) != os.getpid():
                try:
                    if mentions(entry):
                        pids.append(int(entry.name))
                except OSError:
                    pass
        return pids

    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in matching():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout
        while matching() and time.monotonic() < deadline:
            time.sleep(0.2)
