"""Run storage (workers/storage.py) on a local directory and on a real S3 (SeaweedFS): what Ctrl-C
discards, what it keeps, and the checks preflight makes before any work."""

from dataclasses import dataclass
from pathlib import Path

import pytest

from workers import s3_store, storage
from workers.models.checkpoints import read_checkpoint
from workers.tasks.bodies import train_job
from workers.tasks.bookkeeping import discard_unfinished, finished
from workers.tasks.records import DataRequest, TrainJob
from workers.training.config import TrainConfig

DATA = DataRequest(train_limit=300, eval_limit=100)


@dataclass(frozen=True)
class S3:
    endpoint: str
    env: dict


@pytest.fixture(scope="module")
def s3(mlflow_stack):
    """The shared S3 (SeaweedFS on 127.0.0.1) with a bucket `runs`, and its environment."""
    return S3(mlflow_stack.s3_endpoint, mlflow_stack.data_bucket("runs"))


@pytest.fixture
def s3_env(s3, monkeypatch):
    """This process's environment pointed at the module's S3 (boto3 reads it from there)."""
    for key, value in s3.env.items():
        monkeypatch.setenv(key, value)
    s3_store.client.cache_clear()
    yield s3
    s3_store.client.cache_clear()


def job(name: str, uri: str, epochs: int) -> TrainJob:
    return TrainJob(name, DATA, "mlp-small", TrainConfig(epochs=epochs, lr=0.05, augment=False), uri)


def interrupted_after_first_epoch(training: TrainJob) -> None:
    """`training` stopped by a Ctrl-C once its first epoch's checkpoint is stored."""

    def ctrl_c(stats):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_job(training, on_epoch=ctrl_c)


@pytest.mark.parametrize("where", ["local", "s3"])
def test_ctrl_c_discards_partial_checkpoints_and_keeps_finished_ones(where, tmp_path, request):
    base = str(tmp_path / "storage") if where == "local" else f"s3://runs/{request.node.name}"
    if where == "s3":
        request.getfixturevalue("s3_env")
    done = job("replica-0", storage.join(base, "replicas", "key", "replica-0.pt"), epochs=1)
    cut = job("replica-1", storage.join(base, "replicas", "key", "replica-1.pt"), epochs=2)
    never = job("replica-2", storage.join(base, "replicas", "key", "replica-2.pt"), epochs=1)
    train_job(done)
    interrupted_after_first_epoch(cut)
    assert finished(done) and not finished(cut) and not finished(never)
    assert discard_unfinished([done, cut, never], settle_s=0) == [cut.checkpoint_uri]
    assert finished(done) and storage.download(done.checkpoint_uri, tmp_path / "copy.pt")
    assert read_checkpoint(tmp_path / "copy.pt")["epoch"] == 1
    assert not storage.download(cut.checkpoint_uri, tmp_path / "gone.pt")
    # a rerun reuses the finished one as it is and trains the discarded one from the start
    assert train_job(done).epochs_run == 0
    assert train_job(cut).resumed_from == 0


def test_delete_removes_a_local_file_its_tmp_sibling_and_the_emptied_folder(tmp_path):
    folder = tmp_path / "replicas" / "key"
    folder.mkdir(parents=True)
    (folder / "replica-0.pt").write_bytes(b"x")
    (folder / "replica-0.pt.tmp").write_bytes(b"half")  # a write killed before its rename
    assert storage.delete(str(folder / "replica-0.pt"))
    assert not folder.exists() and (tmp_path / "replicas").is_dir()
    assert not storage.delete(str(folder / "replica-0.pt"))


def test_delete_an_s3_object(s3_env, tmp_path):
    (tmp_path / "f").write_bytes(b"checkpoint")
    uri = storage.upload(tmp_path / "f", "s3://runs/delete-me/replica-0.pt")
    assert storage.download(uri, tmp_path / "back") and storage.delete(uri)
    assert not storage.download(uri, tmp_path / "again") and not storage.delete(uri)


def test_a_local_storage_check_writes_a_probe_and_leaves_nothing(tmp_path):
    storage.check_writable(str(tmp_path / "runs" / "deep"))
    assert list(tmp_path.iterdir()) == []  # the folders it created for the probe are gone again
    (tmp_path / "kept").mkdir()
    storage.check_writable(str(tmp_path / "kept"))
    assert list((tmp_path / "kept").iterdir()) == []
    (tmp_path / "plain.txt").write_text("x")
    with pytest.raises(storage.StorageError, match=r"plain.txt/runs: cannot write there \(Not a directory\)"):
        storage.check_writable(str(tmp_path / "plain.txt" / "runs"))
    with pytest.raises(storage.StorageError, match=r"plain.txt: cannot write there \(File exists\)"):
        storage.check_writable(str(tmp_path / "plain.txt"))


def test_a_local_storage_check_survives_another_driver_removing_the_new_folder_meanwhile(tmp_path, monkeypatch):
    """Two drivers probing the same new folder: the other one's clean-up removes the folder between
    this one's mkdir and its probe write (seen in CI as `cannot write there (No such file...)`)."""
    write_bytes = Path.write_bytes
    removed = []

    def other_driver_cleans_up_first(self, data):
        if not removed:
            removed.append(self.parent)
            self.parent.rmdir()
        return write_bytes(self, data)

    monkeypatch.setattr(Path, "write_bytes", other_driver_cleans_up_first)
    storage.check_writable(str(tmp_path / "runs"))
    assert removed == [tmp_path / "runs"] and list(tmp_path.iterdir()) == []


def test_an_s3_storage_check_needs_credentials_a_server_and_the_bucket(s3_env, monkeypatch):
    storage.check_writable("s3://runs/prefix")
    with pytest.raises(storage.StorageError, match=r"^s3://missing-bucket/p: no such bucket$"):
        storage.check_writable("s3://missing-bucket/p")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    with pytest.raises(storage.StorageError, match=r"s3://runs/prefix: access denied \(wrong AWS_ACCESS_KEY_ID"):
        storage.check_writable("s3://runs/prefix")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")  # nothing listens on the discard port
    with pytest.raises(storage.StorageError, match="s3://runs/prefix: S3 did not answer"):
        storage.check_writable("s3://runs/prefix", timeout_s=2)
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(key)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(storage.StorageError, match="s3://runs/prefix: no AWS credentials"):
        storage.check_writable("s3://runs/prefix")


def test_an_s3_upload_committed_after_the_discard_is_discarded_too(tmp_path, s3_env, monkeypatch, request):
    """The server commits a killed task's last PUT after the first deletion (as in CI once): the
    checkpoint comes back, and the second look removes it."""
    cut = job("replica-1", f"s3://runs/{request.node.name}/replicas/key/replica-1.pt", epochs=2)
    interrupted_after_first_epoch(cut)
    storage.download(cut.checkpoint_uri, tmp_path / "late.pt")
    delete = storage.delete
    late = []

    def delete_then_the_late_put_lands(uri: str) -> bool:
        removed = delete(uri)
        if not late:
            late.append(storage.upload(tmp_path / "late.pt", uri))
        return removed

    monkeypatch.setattr(storage, "delete", delete_then_the_late_put_lands)
    assert discard_unfinished([cut], settle_s=0.1) == [cut.checkpoint_uri]
    assert late and not storage.download(cut.checkpoint_uri, tmp_path / "gone.pt")


def test_a_cached_s3_checkpoint_is_used_only_while_it_is_what_the_bucket_holds(s3_env, tmp_path):
    """A rerun that writes the same key, or a cached copy changed on this disk, is fetched again: the
    copy is checked against the object's ETag and its own sha256 at download (s3_store.local_path)."""
    from reliability_records import record

    uri = f"s3://runs/cache-{tmp_path.name}/model.pt"
    (tmp_path / "first").write_bytes(b"the first run's checkpoint")
    (tmp_path / "second").write_bytes(b"a rerun's checkpoint, same key")
    storage.upload(tmp_path / "first", uri)
    local = storage.fetch_checkpoint(uri)
    first = Path(local).read_bytes()
    storage.upload(tmp_path / "second", uri)  # the object changes after it was cached
    after_rerun = Path(storage.fetch_checkpoint(uri)).read_bytes()
    Path(local).write_bytes(b"planted on this disk")
    after_edit = Path(storage.fetch_checkpoint(uri)).read_bytes()
    storage.delete(uri)
    with pytest.raises(FileNotFoundError, match="no such checkpoint"):
        storage.fetch_checkpoint(uri)  # a cached copy of an object that is gone is not used
    assert first == b"the first run's checkpoint"
    assert after_rerun == after_edit == b"a rerun's checkpoint, same key"
    record("serving_security", check="a cached S3 checkpoint is used only while the bucket holds that object "
           "(its ETag) and its bytes are the ones downloaded (sha256)", passed=True)  # fmt: skip
