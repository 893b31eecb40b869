"""Folders of this user's in the shared temporary directory that nobody else can have written: the
registry's local copies of versions' artifacts, S3 checkpoints, decompressed data files. A file there is trusted
only because no one else can have put it there, so a folder that is a link, someone else's, or
writable by others is refused."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


def private_folder(name: str) -> Path:
    """`$TMPDIR/congruent-NAME-UID`, made with mode 0700 if missing; PermissionError (one line,
    naming the folder) when it is a link, belongs to another user, or others may write to it."""
    root = Path(tempfile.gettempdir(), f"congruent-{name}-{os.getuid()}")
    root.mkdir(mode=0o700, exist_ok=True)
    info = root.lstat()
    if stat.S_ISLNK(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
        raise PermissionError(f"{root}: must be a folder of this user's that no one else may write")
    return root
