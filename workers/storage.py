"""Run storage: a local directory or an S3 prefix (`s3://bucket/prefix`), one interface.

S3 goes through boto3, which takes the endpoint and credentials from the environment
(`AWS_ENDPOINT_URL_S3`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`) — never from a spec.
"""

from __future__ import annotations

import os
import posixpath
import shutil
from functools import lru_cache
from pathlib import Path

from workers.errors import first_line
from workers.names import is_s3
from workers.private_cache import private_folder


class StorageError(ValueError):
    """Storage that cannot be used; the message is one line naming the place and the problem."""


def join(base: str, *parts: str) -> str:
    """`base/part/…` for local paths and S3 URIs alike."""
    return "/".join([base.rstrip("/"), *parts]) if is_s3(base) else str(Path(base, *parts))


def is_under(uri: str, root: str) -> bool:
    """Whether `uri` names something strictly inside the folder or prefix `root`, after `..`, `.`
    and repeated slashes are resolved (a local path by its absolute form; symlinks are not
    followed): the test of anything deleted or written on a name read from outside."""
    if is_s3(uri) != is_s3(root):
        return False
    if is_s3(uri):
        (bucket, key), (root_bucket, root_key) = _split(uri), _split(root)
        if bucket != root_bucket or ".." in key.split("/"):
            return False
        key, root_key = posixpath.normpath("/" + key), posixpath.normpath("/" + root_key)
        return key.startswith(root_key.rstrip("/") + "/")
    path, base = os.path.normpath(os.path.abspath(uri)), os.path.normpath(os.path.abspath(root))
    return path.startswith(base.rstrip(os.sep) + os.sep)


def _split(uri: str) -> tuple[str, str]:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return bucket, key


@lru_cache(maxsize=1)
def _client():
    import boto3
    from botocore.config import Config

    # a session of its own: boto3's default session keeps the first credentials it resolved, so a process
    # whose AWS_* environment changes (cache_clear) would go on signing with the old keys
    session = boto3.session.Session()
    return session.client("s3", config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 5}))


def split_uri(uri: str) -> tuple[str, str]:
    """`s3://bucket/key` → (bucket, key)."""
    return _split(uri)


def client():  # boto3 generates its client class at run time: no annotation
    """The process's S3 client (endpoint and credentials from the environment)."""
    return _client()


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
    """A local path for a checkpoint URI: the path itself, or a copy of an S3 object in this user's
    private cache folder (private_cache.py: a copy no one else can have planted; downloaded once per
    machine and user). FileNotFoundError when there is no such object."""
    if not is_s3(uri):
        return uri
    try:
        cache = str(private_folder("s3"))
    except PermissionError as e:
        raise StorageError(f"the S3 download cache: {e}") from None
    local = os.path.normpath(os.path.join(cache, uri.removeprefix("s3://")))
    if not is_under(local, cache) or ".." in uri.split("/"):
        raise StorageError(f"{uri}: a checkpoint key may not leave its bucket's folder (`..`)")
    if not os.path.exists(local) and not download(uri, local):
        raise FileNotFoundError(f"{uri}: no such checkpoint")
    return local


_PROBE_ATTEMPTS = 20


def check_writable(uri: str, timeout_s: float = 5.0) -> None:
    """StorageError unless files can be written at `uri`, checked before any work: a local directory
    is created if missing and a probe file written there and removed (with the folders it created);
    an S3 prefix needs credentials and a bucket that answers within `timeout_s`."""
    if is_s3(uri):
        _check_bucket(uri, timeout_s)
        return
    path = Path(uri)
    created = []
    for folder in (path, *path.parents):
        if folder.exists() or folder.is_symlink():
            break
        created.append(folder)
    probe = path / f".congruent-probe-{os.getpid()}"
    try:
        for attempt in range(_PROBE_ATTEMPTS):
            path.mkdir(parents=True, exist_ok=True)
            try:
                probe.write_bytes(b"")
                break
            except FileNotFoundError:
                # another driver probing the same new folder removed it between our mkdir and
                # write (it created it too, and cleans up after its own probe): make it again
                if attempt == _PROBE_ATTEMPTS - 1:
                    raise
        probe.unlink()
    except OSError as e:
        raise StorageError(f"{uri}: cannot write there ({e.strerror or e})") from None
    finally:
        for folder in created:  # deepest first; a folder something else wrote into meanwhile stays
            try:
                folder.rmdir()
            except OSError:
                break


def check_readable(uri: str, timeout_s: float = 5.0) -> None:
    """StorageError unless an S3 URI's bucket answers with this environment's credentials within
    `timeout_s` (one line: no credentials, no such bucket, access denied, no answer)."""
    if is_s3(uri):
        _check_bucket(uri, timeout_s)


def _check_bucket(uri: str, timeout_s: float) -> None:
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError

    bucket, _ = _split(uri)
    session = boto3.session.Session()
    if session.get_credentials() is None:
        raise StorageError(
            f"{uri}: no AWS credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
            "or AWS_PROFILE; AWS_ENDPOINT_URL_S3 for a server other than AWS)"
        )
    config = Config(
        s3={"addressing_style": "path"},
        connect_timeout=timeout_s,
        read_timeout=timeout_s,
        retries={"total_max_attempts": 1},
    )
    try:
        session.client("s3", config=config).head_bucket(Bucket=bucket)
    except ClientError as e:
        code = str(e.response.get("Error", {}).get("Code", ""))
        denied = "access denied (wrong AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, or no right to the bucket)"
        why = {
            "404": "no such bucket",
            "NoSuchBucket": "no such bucket",
            "403": denied,
            "AccessDenied": denied,
            "InvalidAccessKeyId": denied,
            "SignatureDoesNotMatch": denied,
        }.get(code, f"S3 answered {code or e}")
        raise StorageError(f"{uri}: {why}") from None
    except BotoCoreError as e:  # no endpoint, timeouts, bad credentials format
        raise StorageError(f"{uri}: S3 did not answer ({first_line(e)})") from None


def delete_tree(uri: str) -> int:
    """Remove a local folder or every S3 object under the prefix `uri`; the number of files removed."""
    if is_s3(uri):
        bucket, key = _split(uri)
        pages = _client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key.rstrip("/") + "/")
        keys = [item["Key"] for page in pages for item in page.get("Contents", [])]
        for start in range(0, len(keys), 1000):
            _client().delete_objects(
                Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys[start : start + 1000]]}
            )
        return len(keys)
    path = Path(uri)
    if not path.is_dir():
        return 0
    count = sum(1 for p in path.rglob("*") if p.is_file())
    shutil.rmtree(path, ignore_errors=True)
    return count
