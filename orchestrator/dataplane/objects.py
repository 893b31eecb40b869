"""The files of a streamed source on S3 (`data.path: s3://bucket/prefix/*.parquet`): listed through
boto3 with the storage's credentials and endpoint (workers/storage.py: AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL_S3), each with its size and ETag (the checksum the
fingerprint takes instead of reading the bytes), and read through pyarrow's S3 filesystem, which
streams a Parquet shard by row groups and a CSV by blocks. The reading tasks get the same
environment from the driver (`reader_env`)."""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass
from typing import Any

from workers.errors import DataError, first_line
from workers.names import GLOB
from workers.storage import StorageError, check_readable


@dataclass(frozen=True)
class Listed:
    """One object: its URI, size in bytes and ETag."""

    uri: str
    size: int
    etag: str


def list_objects(pattern: str, suffixes: tuple[str, ...]) -> list[Listed]:
    """The objects `pattern` names, sorted: one key, every key under a prefix, or the keys a glob
    matches (fnmatch over the whole key; `*` crosses `/`), kept when they end with one of `suffixes`.
    DataError in one line: no credentials, no such bucket, access denied, nothing there."""
    from botocore.exceptions import BotoCoreError, ClientError

    from workers.storage import client, split_uri

    try:
        check_readable(pattern)
    except StorageError as e:
        raise DataError(str(e)) from None
    bucket, key = split_uri(pattern)
    wild = min((key.index(c) for c in GLOB if c in key), default=None)
    prefix = key if wild is None else key[:wild]
    found: list[Listed] = []
    try:
        for page in client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for item in page.get("Contents", []):
                name = item["Key"]
                under = key.rstrip("/")  # "" for the bucket's root: every key is under it
                exact = wild is None and (not under or name == key or name.startswith(under + "/"))
                if (exact or (wild is not None and fnmatch.fnmatchcase(name, key))) and name.lower().endswith(suffixes):
                    found.append(Listed(f"s3://{bucket}/{name}", int(item["Size"]), str(item["ETag"]).strip('"')))
    except (ClientError, BotoCoreError) as e:
        raise DataError(f"{pattern}: cannot list ({first_line(e)})") from None
    return sorted(found, key=lambda listed: listed.uri)


def filesystem() -> Any:
    """pyarrow's S3 filesystem on this environment's endpoint and credentials."""
    from pyarrow import fs  # type: ignore[import-untyped]

    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    options: dict[str, Any] = {"region": os.environ.get("AWS_DEFAULT_REGION", "us-east-1")}
    if endpoint:
        scheme, _, host = endpoint.partition("://")
        options.update(endpoint_override=host.rstrip("/"), scheme=scheme)
    if os.environ.get("AWS_ACCESS_KEY_ID"):
        options.update(access_key=os.environ["AWS_ACCESS_KEY_ID"], secret_key=os.environ.get("AWS_SECRET_ACCESS_KEY"))
    return fs.S3FileSystem(**options)


def open_input(uri: str) -> Any:
    """A random-access pyarrow file of an S3 object (`s3://bucket/key`)."""
    return filesystem().open_input_file(uri.removeprefix("s3://"))


def reader_env() -> dict[str, str]:
    """What a reading task needs from the driver's environment: the storage's S3 settings; none in a
    job whose workers load them from its credentials file (orchestrator/jobs/credentials.py), so
    that no task's runtime_env shows them."""
    from orchestrator.host import CREDENTIALS_FROM_FILE, worker_env

    return {} if os.environ.get(CREDENTIALS_FROM_FILE) else worker_env()
