"""The S3 store (workers/storage.py resolves `s3://bucket/key` to it): listings, copies and deletes
through boto3, reads through pyarrow's S3 filesystem (a Parquet shard by row groups, a CSV by blocks),
both on the endpoint and credentials of the environment (AWS_ENDPOINT_URL_S3, AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY), never a spec's. A listed object's ETag is its checksum (a run's fingerprint
takes it instead of reading the bytes)."""

from __future__ import annotations

import fnmatch
import json
import os
import posixpath
import tempfile
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from workers.digests import file_sha256
from workers.errors import DataError, first_line
from workers.names import GLOB
from workers.private_cache import private_folder
from workers.stores import LOCAL, Listed, StorageError

MISSING_CODES = ("404", "NoSuchKey", "NotFound")
STAMP = ".source.json"  # beside a cached copy: the object's ETag it was downloaded at, and the copy's sha256


def split_uri(uri: str) -> tuple[str, str]:
    """`s3://bucket/key` → (bucket, key)."""
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return bucket, key


@lru_cache(maxsize=1)
def client():  # boto3 generates its client class at run time: no annotation
    """The process's S3 client (endpoint and credentials from the environment)."""
    import boto3
    from botocore.config import Config

    # a session of its own: boto3's default session keeps the first credentials it resolved, so a process
    # whose AWS_* environment changes (cache_clear) would go on signing with the old keys
    session = boto3.session.Session()
    return session.client("s3", config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 5}))


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


def cached_copy_holds(local: str, etag: str) -> bool:
    """Whether the cached copy at `local` is the object whose ETag is now `etag`, unchanged since it
    was downloaded (its stamp's ETag and sha256)."""
    try:
        with open(local + STAMP) as f:
            stamp = json.load(f)
        return bool(stamp.get("etag") == etag and stamp.get("sha256") == file_sha256(local))
    except (OSError, ValueError, AttributeError):
        return False


def _missing(error: Any) -> bool:
    return error.response.get("Error", {}).get("Code") in MISSING_CODES


class S3Store:
    """Objects of an S3 bucket, named `s3://bucket/key`."""

    remote = True

    def join(self, base: str, *parts: str) -> str:
        return "/".join([base.rstrip("/"), *parts])

    def is_under(self, uri: str, root: str) -> bool:
        (bucket, key), (root_bucket, root_key) = split_uri(uri), split_uri(root)
        if bucket != root_bucket or ".." in key.split("/"):
            return False
        key, root_key = posixpath.normpath("/" + key), posixpath.normpath("/" + root_key)
        return key.startswith(root_key.rstrip("/") + "/")

    def upload(self, local_path: str | os.PathLike, uri: str) -> str:
        client().upload_file(str(local_path), *split_uri(uri))
        return uri

    def download(self, uri: str, local_path: str | os.PathLike) -> bool:
        from botocore.exceptions import ClientError

        os.makedirs(os.path.dirname(os.path.abspath(local_path)), exist_ok=True)
        bucket, key = split_uri(uri)
        try:
            client().download_file(bucket, key, str(local_path))
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("404", "NoSuchKey"):
                return False
            raise
        return True

    def delete(self, uri: str) -> bool:
        from botocore.exceptions import ClientError

        bucket, key = split_uri(uri)
        try:
            client().head_object(Bucket=bucket, Key=key)
        except ClientError as e:
            if _missing(e):
                return False
            raise
        client().delete_object(Bucket=bucket, Key=key)
        return True

    def delete_tree(self, uri: str) -> int:
        bucket, key = split_uri(uri)
        pages = client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key.rstrip("/") + "/")
        keys = [item["Key"] for page in pages for item in page.get("Contents", [])]
        for start in range(0, len(keys), 1000):
            client().delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys[start : start + 1000]]})
        return len(keys)

    def local_path(self, uri: str) -> str:
        """A copy in this user's private cache folder (private_cache.py: one no one else can have
        planted), used only while it is what the bucket holds: the object's ETag it was downloaded at
        and the copy's sha256 are kept beside it (`STAMP`), and a copy whose object has changed since
        (a rerun that wrote the same key) or whose bytes changed on this disk is downloaded again.
        FileNotFoundError when there is no object."""
        from botocore.exceptions import ClientError

        try:
            cache = str(private_folder("s3"))
        except PermissionError as e:
            raise StorageError(f"the S3 download cache: {e}") from None
        local = os.path.normpath(os.path.join(cache, uri.removeprefix("s3://")))
        if not LOCAL.is_under(local, cache) or ".." in uri.split("/"):
            raise StorageError(f"{uri}: a checkpoint key may not leave its bucket's folder (`..`)")
        try:
            _, etag = self.checksum(uri)
        except ClientError as e:
            if _missing(e):
                raise FileNotFoundError(f"{uri}: no such checkpoint") from None
            raise
        if cached_copy_holds(local, etag):
            return local
        os.makedirs(os.path.dirname(local), exist_ok=True)
        # into a folder of its own, then renamed into place: two workers that fetch one key at once
        # never read each other's half-written file
        with tempfile.TemporaryDirectory(dir=os.path.dirname(local), prefix=".download-") as folder:
            fetched = os.path.join(folder, "object")
            if not self.download(uri, fetched):
                raise FileNotFoundError(f"{uri}: no such checkpoint")
            stamp = {"etag": etag, "sha256": file_sha256(fetched)}
            os.replace(fetched, local)
            with open(local + STAMP, "w") as f:
                json.dump(stamp, f)
        return local

    def working_copy(self, uri: str, scratch: Callable[[], str]) -> str:
        local = scratch()
        self.download(uri, local)
        return local

    def check_writable(self, uri: str, timeout_s: float) -> None:
        self.check_readable(uri, timeout_s)

    def check_readable(self, uri: str, timeout_s: float) -> None:
        """StorageError unless the bucket answers with this environment's credentials within `timeout_s`."""
        import boto3
        from botocore.config import Config
        from botocore.exceptions import BotoCoreError, ClientError

        bucket, _ = split_uri(uri)
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

    def listing(self, pattern: str, suffixes: tuple[str, ...]) -> list[Listed]:
        """The objects `pattern` names: one key, every key under a prefix, or the keys a glob matches
        (fnmatch over the whole key; `*` crosses `/`), kept when they end with one of `suffixes`.
        DataError in one line: no credentials, no such bucket, access denied, nothing there."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.check_readable(pattern, 5.0)
        except StorageError as e:
            raise DataError(str(e)) from None
        bucket, key = split_uri(pattern)
        wild = min((key.index(c) for c in GLOB if c in key), default=None)
        prefix = key if wild is None else key[:wild]
        under = key.rstrip("/")  # "" for the bucket's root: every key is under it
        found: list[Listed] = []
        try:
            for page in client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
                for item in page.get("Contents", []):
                    name = item["Key"]
                    exact = wild is None and (not under or name == key or name.startswith(under + "/"))
                    if (exact or (wild is not None and fnmatch.fnmatchcase(name, key))) and name.lower().endswith(
                        suffixes
                    ):
                        found.append(Listed(f"s3://{bucket}/{name}", int(item["Size"]), str(item["ETag"]).strip('"')))
        except (ClientError, BotoCoreError) as e:
            raise DataError(f"{pattern}: cannot list ({first_line(e)})") from None
        return sorted(found, key=lambda listed: listed.uri)

    def open_input(self, uri: str) -> Any:
        return filesystem().open_input_file(uri.removeprefix("s3://"))

    def read_bytes(self, uri: str) -> bytes:
        try:
            with self.open_input(uri) as f:
                return bytes(f.read())
        except OSError as e:
            raise DataError(f"{uri}: cannot read ({first_line(e)})") from None

    def checksum(self, uri: str) -> tuple[int, str]:
        bucket, key = split_uri(uri)
        head = client().head_object(Bucket=bucket, Key=key)
        return int(head["ContentLength"]), str(head["ETag"]).strip('"')


S3 = S3Store()
