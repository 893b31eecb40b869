"""Local copies of registered versions' artifacts (checkpoint, ledger): in a cache folder only this
user may write, and each checked, before it is used, against the sha256 the version's registration
recorded in its tags (`checksum_tags`). A file is never trusted for being there: another user could
have planted it in a shared /tmp, and a copy may have been changed since it was fetched. Versions
registered before checksums have none to check: only the private folder protects their copies."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Mapping
from pathlib import Path

from mlflow import MlflowClient

from orchestrator.tracking.tags import CHECKSUM_PREFIX
from orchestrator.tracking.version_refs import RegistryError
from workers.digests import file_sha256 as sha256_of  # the name registry.py reads it by
from workers.private_cache import private_folder
from workers.storage import is_under

RUN_ID = re.compile(r"^[0-9a-f]{8,64}$")


def checksum_tag(artifact: str) -> str:
    """The version tag holding the sha256 of its run's artifact `artifact` (e.g. checkpoint/model.pt)."""
    return f"{CHECKSUM_PREFIX}{artifact}"


def cache_root() -> Path:
    """This user's cache folder (mode 0700); RegistryError if the path is a link, or a folder
    someone else owns or others may write."""
    try:
        return private_folder("registry")
    except PermissionError as e:
        raise RegistryError(f"the registry cache: {e}") from None


def fetch(run_id: str, artifact: str, tags: Mapping[str, str] | None = None) -> Path:
    """A local copy of the run's `artifact`, checked against its checksum tag in `tags` (a version's)
    when there is one: a cached copy that differs is fetched again, and a fetched one that differs
    (the artifact store changed since registration) raises RegistryError."""
    if not RUN_ID.match(run_id):
        raise RegistryError(f"{run_id!r} is not an MLflow run id")
    root = cache_root()
    local = root / run_id / artifact
    if not is_under(str(local), str(root)):
        raise RegistryError(f"{artifact!r}: an artifact path may not leave its run's folder")
    expected = (tags or {}).get(checksum_tag(artifact))
    if local.exists() and (expected is None or sha256_of(local) == expected):
        return local
    local.parent.mkdir(parents=True, exist_ok=True)
    # into a folder of its own, then renamed into place: two drivers that fetch one version at once
    # never read each other's half-written file
    with tempfile.TemporaryDirectory(dir=local.parent, prefix=".download-") as folder:
        fetched = Path(MlflowClient().download_artifacts(run_id, artifact, folder))
        if expected is not None and sha256_of(fetched) != expected:
            raise RegistryError(
                f"{artifact} of run {run_id} differs from the one registered (sha256 {expected[:12]}…): "
                "the artifact store was changed since; not used"
            )
        fetched.replace(local)
    return local
