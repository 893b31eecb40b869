"""What a streamed source's reading tasks need from the driver to read S3 objects: the storage's S3
settings (workers/storage.py resolves, lists and opens every file, local or on S3)."""

from __future__ import annotations

import os


def reader_env() -> dict[str, str]:
    """What a reading task needs from the driver's environment: the storage's S3 settings; none in a
    job whose workers load them from its credentials file (orchestrator/jobs/credentials.py), so
    that no task's runtime_env shows them."""
    from orchestrator.host import CREDENTIALS_FROM_FILE, worker_env

    return {} if os.environ.get(CREDENTIALS_FROM_FILE) else worker_env()
