"""`storage`: checkpoints can be written there — a probe file written and removed; on S3,
credentials and a bucket that answers."""

from __future__ import annotations

from orchestrator.planning.facts.kinds import Found, Problems, Storage
from workers import storage
from workers.errors import problems_of


def check(found: Found) -> Storage | Problems:
    uri = found.settled.storage
    try:
        storage.check_writable(uri)
    except storage.StorageError as e:
        return Problems.of("storage", problems_of(e))
    return Storage(uri)
