"""What a store is (workers/storage.py resolves a URI to one) and the local one: a path on this
machine's file system. s3_store.py is the other."""

from __future__ import annotations

import glob
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from workers.digests import file_sha256
from workers.names import is_glob


class StorageError(ValueError):
    """Storage that cannot be used; the message is one line naming the place and the problem."""


@dataclass(frozen=True)
class Listed:
    """One listed file: its URI, size in bytes, and its checksum where the listing gives one free (an
    S3 object's ETag; None for a local file, whose bytes a listing does not read)."""

    uri: str
    size: int
    etag: str | None = None


class Store(Protocol):
    """What a store does with the URIs it holds; each operation is described in workers/storage.py."""

    remote: bool  # the bytes are not on this machine: a source there is listed, not read, before a run

    def join(self, base: str, *parts: str) -> str: ...
    def is_under(self, uri: str, root: str) -> bool: ...
    def upload(self, local_path: str | os.PathLike, uri: str) -> str: ...
    def download(self, uri: str, local_path: str | os.PathLike) -> bool: ...
    def delete(self, uri: str) -> bool: ...
    def delete_tree(self, uri: str) -> int: ...
    def local_path(self, uri: str) -> str: ...
    def working_copy(self, uri: str, scratch: Callable[[], str]) -> str: ...
    def check_writable(self, uri: str, timeout_s: float) -> None: ...
    def check_readable(self, uri: str, timeout_s: float) -> None: ...
    def listing(self, pattern: str, suffixes: tuple[str, ...]) -> list[Listed]: ...
    def open_input(self, uri: str) -> Any: ...
    def read_bytes(self, uri: str) -> bytes: ...
    def checksum(self, uri: str) -> tuple[int, str]: ...


_PROBE_ATTEMPTS = 20


class LocalStore:
    """Paths on this machine."""

    remote = False

    def join(self, base: str, *parts: str) -> str:
        return str(Path(base, *parts))

    def is_under(self, uri: str, root: str) -> bool:
        path, base = os.path.normpath(os.path.abspath(uri)), os.path.normpath(os.path.abspath(root))
        return path.startswith(base.rstrip(os.sep) + os.sep)

    def upload(self, local_path: str | os.PathLike, uri: str) -> str:
        if Path(local_path).resolve() != Path(uri).resolve():
            Path(uri).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(local_path, uri)
        return uri

    def download(self, uri: str, local_path: str | os.PathLike) -> bool:
        Path(local_path).parent.mkdir(parents=True, exist_ok=True)
        if not Path(uri).exists():
            return False
        if Path(local_path).resolve() != Path(uri).resolve():
            shutil.copyfile(uri, local_path)
        return True

    def delete(self, uri: str) -> bool:
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

    def delete_tree(self, uri: str) -> int:
        path = Path(uri)
        if not path.is_dir():
            return 0
        count = sum(1 for p in path.rglob("*") if p.is_file())
        shutil.rmtree(path, ignore_errors=True)
        return count

    def local_path(self, uri: str) -> str:
        return uri

    def working_copy(self, uri: str, scratch: Callable[[], str]) -> str:
        return uri

    def check_writable(self, uri: str, timeout_s: float) -> None:
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

    def check_readable(self, uri: str, timeout_s: float) -> None:
        """Nothing to check before reading a local path: its reader says what is missing."""

    def listing(self, pattern: str, suffixes: tuple[str, ...]) -> list[Listed]:
        """A glob's matches as they are, a folder's files with one of `suffixes`, or the one file."""
        if is_glob(pattern):
            files = sorted(glob.glob(pattern, recursive=True))
        elif os.path.isdir(pattern):
            files = sorted(str(p) for p in Path(pattern).rglob("*") if p.is_file() and p.suffix.lower() in suffixes)
        else:
            files = [pattern] if os.path.isfile(pattern) else []
        return [Listed(file, os.path.getsize(file)) for file in files]

    def open_input(self, uri: str) -> Any:
        return uri

    def read_bytes(self, uri: str) -> bytes:
        return Path(uri).read_bytes()

    def checksum(self, uri: str) -> tuple[int, str]:
        return os.path.getsize(uri), file_sha256(uri)


LOCAL = LocalStore()
