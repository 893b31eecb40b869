"""sha256 of a file's bytes and of a folder's files, read in 1 MiB blocks: the one way a file or a
folder on this machine is fingerprinted (a shard, an init's weights, a Hugging Face folder, a
registered checkpoint and the artifacts fetched from the registry). Imports the standard library
only, so that any process, a served model's included, can use it."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

BLOCK_BYTES = 1 << 20  # what is read at a time


def _update(digest: Any, path: str | os.PathLike) -> None:
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(BLOCK_BYTES), b""):
            digest.update(block)


def file_sha256(path: str | os.PathLike) -> str:
    """sha256 of a file's bytes, 64 hex digits."""
    digest = hashlib.sha256()
    _update(digest, path)
    return digest.hexdigest()


def folder_sha256(path: str | os.PathLike, keep: Callable[[Path], bool] = lambda file: True) -> str:
    """sha256 over a folder's files that `keep` keeps (every one by default), in name order: each
    one's name relative to `path`, a NUL, its bytes; 64 hex digits."""
    digest = hashlib.sha256()
    for file in sorted(p for p in Path(path).rglob("*") if p.is_file() and keep(p)):
        digest.update(str(file.relative_to(path)).encode() + b"\0")
        _update(digest, file)
    return digest.hexdigest()
