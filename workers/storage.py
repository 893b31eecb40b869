"""Run storage: a local directory or an S3 prefix (`s3://bucket/prefix`), one interface.

S3 goes through boto3, which takes the endpoint and credentials from the environment
(`AWS_ENDPOINT_URL_S3`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`) — never from a spec.
"""

from __future__ import annotations

import os
import shutil
from functools import lru_cache
from pathlib import Path


def is_s3(uri: str) -> bool:
    return uri.startswith("s3://")


def join(base: str, *parts: str) -> str:
    """`base/part/…` for local paths and S3 URIs alike."""
    return "/".join([base.rstrip("/"), *parts]) if is_s3(base) else str(Path(base, *parts))


def _split(uri: str) -> tuple[str, str]:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return bucket, key


@lru_cache(maxsize=1)
def _client():
    import boto3
    from botocore.config import Config

    return boto3.client("s3", config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 5}))


def upload(local_path: str | os.PathLike, uri: str) -> str:
    """Copy a local file to `uri` (an S3 URI or a local path); return `uri`."""
    if is_s3(uri):
        bucket, key = _split(uri)
        _client().upload_file(str(local_path), bucket, key)
    elif Path(local_path).resolve() != Path(uri).resolve():
        Path(uri).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(local_path, uri)
    return uri


def download(uri: str, local_path: str | os.PathLike) -> bool:
    """Copy `uri` to a local file; False when `uri` does not exist."""
    Path(local_path).parent.mkdir(parents=True, exist_ok=True)
    if is_s3(uri):
        from botocore.exceptions import ClientError

        bucket, key = _split(uri)
        try:
            _client().download_file(bucket, key, str(local_path))
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("404", "NoSuchKey"):
                return False
            raise
        return True
    if not Path(uri).exists():
        return False
    if Path(local_path).resolve() != Path(uri).resolve():
        shutil.copyfile(uri, local_path)
    return True


def delete(uri: str) -> bool:
    """Remove the file or S3 object at `uri`, and a local file's `.tmp` sibling (a write cut short
    by `save_checkpoint`); True when something was removed. An emptied local folder goes too."""
    if is_s3(uri):
        bucket, key = _split(uri)
        from botocore.exceptions import ClientError

        try:
            _client().head_object(Bucket=bucket, Key=key)
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise
        _client().delete_object(Bucket=bucket, Key=key)
        return True
    path = Path(uri)
    removed = False
    for candidate in (path, path.with_name(path.name + ".tmp")):
        try:
            candidate.unlink()
            removed = True
        except FileNotFoundError:
            pass
    try:
        path.parent.rmdir()  # only when empty
    except OSError:
        pass
    return removed


def fetch_checkpoint(uri: str) -> str:
    """A local path for a checkpoint URI: the path itself, or a copy of an S3 object in a temp-dir
    cache (downloaded once per machine). FileNotFoundError when there is no such object."""
    if not is_s3(uri):
        return uri
    import tempfile

    local = os.path.join(tempfile.gettempdir(), "congruent-cache", uri.removeprefix("s3://"))
    if not os.path.exists(local) and not download(uri, local):
        raise FileNotFoundError(f"{uri}: no such checkpoint")
    return local
