"""A registered version's artifacts are used only as registered (orchestrator/tracking/artifact_cache.py):
a cached copy changed since it was fetched is fetched again, an artifact store changed since
registration is refused, and a cache folder others may write is refused."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import mlflow
import numpy as np
import pytest
from mlflow import MlflowClient

from orchestrator.tracking import artifact_cache, registry, store
from orchestrator.tracking.version_refs import RegistryError, VersionRef
from reliability_records import record
from test_promotion import LABELS, _register


@pytest.fixture
def version(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))  # a cache of this test's own
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")  # and a store
    store.configure()
    model = f"cached-{tmp_path.name}"
    mlflow.set_experiment(model)
    return VersionRef(model, _register(tmp_path, model, "v1", LABELS.copy()))


def test_a_cached_copy_changed_after_it_was_fetched_is_fetched_again(version):
    path = Path(registry.checkpoint_of(version))
    original = path.read_bytes()
    tags = MlflowClient().get_model_version(version.name, version.version).tags
    assert tags[artifact_cache.checksum_tag("checkpoint/model.pt")] == artifact_cache.sha256_of(path)
    path.write_bytes(b"planted")  # before: used as it was found
    assert Path(registry.checkpoint_of(version)).read_bytes() == original
    ledger = registry.ledger_of(version)
    assert np.array_equal(ledger["labels"], LABELS)
    record("security", check="a registry cache file changed after download is fetched again", passed=True)


def test_an_artifact_store_changed_since_registration_is_refused(version):
    mv = MlflowClient().get_model_version(version.name, version.version)
    stored = Path(MlflowClient().download_artifacts(mv.run_id, "checkpoint/model.pt", tempfile.mkdtemp()))
    artifact_uri = mlflow.get_run(mv.run_id).info.artifact_uri
    in_store = Path(artifact_uri.removeprefix("file://"), "checkpoint", "model.pt")
    assert in_store.read_bytes() == stored.read_bytes()  # the local store's own file
    in_store.write_bytes(b"swapped")
    with pytest.raises(RegistryError, match="differs from the one registered"):
        registry.checkpoint_of(version)
    record("security", check="a checkpoint changed in the artifact store after registration is refused", passed=True)


def test_a_cache_folder_others_may_write_is_refused(version):
    root = artifact_cache.cache_root()
    os.chmod(root, 0o777)
    with pytest.raises(RegistryError, match="no one else may write"):
        registry.checkpoint_of(version)
    os.chmod(root, 0o700)
    assert Path(registry.checkpoint_of(version)).exists()
