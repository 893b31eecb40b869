"""Run storage and data sources: a local path or an S3 URI (`s3://bucket/key`), resolved once per URI.

`store(uri)` picks the store by the URI's scheme, as MLflow picks an artifact store: the local file
system for a path (stores.py), S3 for `s3://…` (s3_store.py: boto3 and pyarrow's S3 filesystem on
the environment's endpoint and credentials, never a spec's). Both offer the same operations — join,
open, read, list, checksum, copy up and down, delete, the checks before a run — and the functions
here are those operations on the URI's own store, so no caller branches on the scheme. A caller asks
`store(uri).remote` only where a remote source is treated otherwise on purpose (listed rather than
read before a run; only ever streamed).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from workers.names import is_s3
from workers.s3_store import S3
from workers.stores import LOCAL
from workers.stores import Listed as Listed  # what `listing` gives, and the stores' error and interface:
from workers.stores import StorageError as StorageError  # their callers name them here
from workers.stores import Store as Store


def store(uri: str) -> Store:
    """The store that holds `uri`: S3 for `s3://…`, else the local file system."""
    return S3 if is_s3(uri) else LOCAL


def join(base: str, *parts: str) -> str:
    """`base/part/…` for local paths and S3 URIs alike (no parts: `base` as its store writes it)."""
    return store(base).join(base, *parts)


def is_under(uri: str, root: str) -> bool:
    """Whether `uri` names something strictly inside the folder or prefix `root`, after `..`, `.`
    and repeated slashes are resolved (a local path by its absolute form; symlinks are not
    followed): the test of anything deleted or written on a name read from outside."""
    return store(uri) is store(root) and store(uri).is_under(uri, root)


def upload(local_path: str | os.PathLike, uri: str) -> str:
    """Copy a local file to `uri` (an S3 URI or a local path); return `uri`."""
    return store(uri).upload(local_path, uri)


def download(uri: str, local_path: str | os.PathLike) -> bool:
    """Copy `uri` to a local file; False when `uri` does not exist."""
    return store(uri).download(uri, local_path)


def delete(uri: str) -> bool:
    """Remove the file or S3 object at `uri`, and a local file's `.tmp` sibling (a write cut short
    by `save_checkpoint`); True when something was removed. An emptied local folder goes too."""
    return store(uri).delete(uri)


def delete_tree(uri: str) -> int:
    """Remove a local folder or every S3 object under the prefix `uri`; the number of files removed."""
    return store(uri).delete_tree(uri)


def fetch_checkpoint(uri: str) -> str:
    """A local path for a checkpoint URI: the path itself, or a copy of an S3 object in this user's
    private cache folder (private_cache.py: a copy no one else can have planted; downloaded once per
    machine and user). FileNotFoundError when there is no such object."""
    return store(uri).local_path(uri)


def working_copy(uri: str, scratch: Callable[[], str]) -> str:
    """Where `uri`'s file is read and written on this machine: a local path itself, or for an S3
    object the local path `scratch()` gives, holding the object if there is one yet."""
    return store(uri).working_copy(uri, scratch)


def check_writable(uri: str, timeout_s: float = 5.0) -> None:
    """StorageError unless files can be written at `uri`, checked before any work: a local directory
    is created if missing and a probe file written there and removed (with the folders it created);
    an S3 prefix needs credentials and a bucket that answers within `timeout_s`."""
    store(uri).check_writable(uri, timeout_s)


def check_readable(uri: str, timeout_s: float = 5.0) -> None:
    """StorageError unless an S3 URI's bucket answers with this environment's credentials within
    `timeout_s` (one line: no credentials, no such bucket, access denied, no answer)."""
    store(uri).check_readable(uri, timeout_s)


def listing(pattern: str, suffixes: tuple[str, ...]) -> list[Listed]:
    """The files `pattern` names, sorted, each with its size (and on S3 its ETag): locally a glob's
    matches as they are, a folder's files with one of `suffixes`, or the one file; on S3 one key,
    every key under a prefix or a glob's (fnmatch over the whole key: `*` crosses `/`), each kept
    by `suffixes`, and a DataError in one line where the bucket cannot be listed."""
    return store(pattern).listing(pattern, suffixes)


def open_input(uri: str) -> Any:
    """What pyarrow reads `uri` from: a local path, or an S3 object's random-access pyarrow file."""
    return store(uri).open_input(uri)


def read_bytes(uri: str) -> bytes:
    """A file's or an S3 object's bytes (an S3 object that cannot be read: a DataError naming it)."""
    return store(uri).read_bytes(uri)


def checksum(uri: str) -> tuple[int, str]:
    """(size, checksum) of a file now: a local file's sha256 (workers/digests.py), an S3 object's ETag."""
    return store(uri).checksum(uri)
