"""A pytest plugin (``pytest_plugins = ["services"]``): the session fixture ``mlflow_stack``, a real
MLflow server on 127.0.0.1 with a PostgreSQL backend store and artifacts in SeaweedFS S3, started
with the helpers of servers.py and stopped in reverse order — the one set of services the tests
share (a test keeps its data apart in a bucket or an experiment of its own: `data_bucket`); only the tests
that kill or restart a server start one of their own."""

from __future__ import annotations

import contextlib
import secrets
from dataclasses import dataclass
from pathlib import Path

import mlflow
import pytest
from mlflow.tracking._model_registry import utils as registry_utils
from mlflow.tracking._tracking_service import utils as tracking_utils

from servers import data_settings, s3_client, s3_settings, start_mlflow_server, start_postgres, start_seaweedfs


@contextlib.contextmanager
def pointed_at(uri, monkeypatch):
    """Point mlflow's global tracking and registry URIs at `uri`; restore both afterwards.

    `mlflow.set_tracking_uri` / `set_registry_uri` also write MLFLOW_TRACKING_URI /
    MLFLOW_REGISTRY_URI into os.environ: monkeypatch owns those variables and restores them."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_REGISTRY_URI", uri)
    old_tracking, old_registry = tracking_utils._tracking_uri, registry_utils._registry_uri
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            mlflow.end_run()
        mlflow.set_tracking_uri(old_tracking)
        mlflow.set_registry_uri(old_registry)


@dataclass(frozen=True)
class MlflowStack:
    tracking_uri: str  # http://127.0.0.1:P (the mlflow server; also its registry)
    s3_endpoint: str  # http://127.0.0.1:S3PORT (SeaweedFS)
    bucket: str  # "mlflow"; the server stores artifacts under s3://mlflow/artifacts/
    env: dict  # what a client process needs (tracking URI, S3 endpoint, creds, checksums)
    postgres_uri: str  # postgresql+psycopg://mlflow@127.0.0.1:PG/mlflow (the server's backend)
    postgres_dsn: str  # the same in libpq form, for psycopg.connect()
    artifacts_destination: str  # s3://mlflow/artifacts
    access_key: str
    secret_key: str
    directory: Path  # logs: postgres/postgres.log, seaweedfs/seaweedfs.log, mlflow/mlflow-server.log

    def s3_client(self):
        return s3_client(self.s3_endpoint, self.access_key, self.secret_key)

    def data_bucket(self, name: str) -> dict:
        """Bucket `name` on the shared S3 (created if absent), and the environment a process reading
        or writing it needs (`data_settings`: endpoint, credentials, region, checksum settings)."""
        client = self.s3_client()
        if name not in {b["Name"] for b in client.list_buckets().get("Buckets", [])}:
            client.create_bucket(Bucket=name)
        return data_settings(self.s3_endpoint, self.access_key, self.secret_key)


@pytest.fixture(scope="session")
def mlflow_stack(tmp_path_factory):
    """A real MLflow server on 127.0.0.1 (PostgreSQL backend store, artifacts in SeaweedFS S3).

    Everything started is stopped in reverse order at the end, also when a start fails midway.
    """
    root = tmp_path_factory.mktemp("mlflow_stack")
    bucket = "mlflow"
    access_key = "test" + secrets.token_hex(8)
    secret_key = secrets.token_urlsafe(32)  # per session, never a constant
    with contextlib.ExitStack() as stack:
        pg = start_postgres(root / "postgres")
        stack.callback(pg.stop)
        s3 = start_seaweedfs(root / "seaweedfs", access_key, secret_key, buckets=(bucket,))
        stack.callback(s3.stop)
        s3_env = s3_settings(s3.endpoint, access_key, secret_key)
        destination = f"s3://{bucket}/artifacts"
        server = start_mlflow_server(root / "mlflow", pg.uri, destination, s3_env)
        stack.callback(server.stop)
        yield MlflowStack(
            tracking_uri=server.uri,
            s3_endpoint=s3.endpoint,
            bucket=bucket,
            env={"MLFLOW_TRACKING_URI": server.uri, **s3_env},
            postgres_uri=pg.uri,
            postgres_dsn=pg.dsn,
            artifacts_destination=destination,
            access_key=access_key,
            secret_key=secret_key,
            directory=root,
        )
