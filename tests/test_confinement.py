"""Names read from outside (S3 keys, run tags) are confined to where they belong before anything
is read or deleted there (workers/storage.py `is_under`, `fetch_checkpoint`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from reliability_records import record
from workers import storage
from workers.s3_store import S3Store


@pytest.mark.parametrize(
    ("uri", "root", "inside"),
    [
        ("/srv/runs/m/v2/tmp/tune-1", "/srv/runs/m/v2/tmp", True),
        ("/srv/runs/m/v2/tmp", "/srv/runs/m/v2/tmp", False),  # the root itself: not strictly inside
        ("/srv/runs/m/v2/tmp-not/x", "/srv/runs/m/v2/tmp", False),  # a sibling sharing the prefix
        ("/srv/runs/m/v2/tmp/../../v1", "/srv/runs/m/v2/tmp", False),
        ("/", "/srv/runs/m/v2/tmp", False),
        ("s3://runs/m/v2/tmp/tune-1", "s3://runs/m/v2/tmp", True),
        ("s3://runs/m/v2/tmp//tune-1", "s3://runs/m/v2/tmp/", True),
        ("s3://runs/m/v2/tmp/../v1", "s3://runs/m/v2/tmp", False),
        ("s3://other/m/v2/tmp/x", "s3://runs/m/v2/tmp", False),  # another bucket
        ("s3://runs/m/v2/tmp-not", "s3://runs/m/v2/tmp", False),
        ("/srv/runs/m/v2/tmp/x", "s3://runs/m/v2/tmp", False),
    ],
)
def test_is_under_resolves_dots_and_prefixes(uri, root, inside):
    assert storage.is_under(uri, root) is inside


def test_a_checkpoint_key_cannot_leave_the_download_cache(tmp_path, monkeypatch):
    """s3://bucket/../../x would be joined into a path outside the cache (before: written there)."""
    import tempfile

    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    fetched = []

    def download(self, uri, local):  # as boto3 would: the object's bytes at `local`
        fetched.append(local)
        Path(local).write_bytes(b"a checkpoint")
        return True

    monkeypatch.setattr(S3Store, "download", download)
    monkeypatch.setattr(S3Store, "checksum", lambda self, uri: (12, "an-etag"))  # the object's HEAD
    for uri in ("s3://runs/../../etc/cron.d/x", "s3://runs/a/../../../outside.pt"):
        with pytest.raises(storage.StorageError, match="may not leave"):
            storage.fetch_checkpoint(uri)
    assert fetched == []
    local = tmp_path / f"congruent-s3-{os.getuid()}/runs/m/v2/model.pt"
    assert storage.fetch_checkpoint("s3://runs/m/v2/model.pt") == str(local)
    os.chmod(local.parents[3], 0o777)  # a cache folder others may write: its copies are not used
    with pytest.raises(storage.StorageError, match="no one else may write"):
        storage.fetch_checkpoint("s3://runs/m/v2/model.pt")
    record("security", check="an S3 checkpoint key with .. cannot leave the download cache", passed=True)
