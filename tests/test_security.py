"""Security properties, each shown by an attempt that must fail: pickled payloads in checkpoints,
ledgers and data do not execute; user model factories run only when the spec opts in; credentials
come from the environment and never reach MLflow params or tags; compose secrets come from .env."""

import re
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from mlflow import MlflowClient
from pydantic import BaseModel

from orchestrator.tracking import runs, store
from orchestrator.tracking.ledger import read_ledger
from pipelines.spec import SpecError, UpdateSpec, parse_spec
from reliability_records import record
from workers.data import DataError
from workers.data.formats.npz import load_npz
from workers.models.architectures import ModelError
from workers.models.checkpoints import CheckpointError, ModelSettings, load_model, save_checkpoint
from workers.tasks.records import TrainRecord

ROOT = Path(__file__).resolve().parent.parent
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "AKIA-test-9d1e",
    "AWS_SECRET_ACCESS_KEY": "secret-test-4b7c",
    "MLFLOW_TRACKING_PASSWORD": "password-test-6e0d",
    "MLFLOW_TRACKING_TOKEN": "token-test-c3f1",
}  # MLFLOW_TRACKING_USERNAME is no secret: MLflow records it as the run's `mlflow.user` tag by design
FACTORY_CALLS = []


def spy_factory(num_classes, inputs):
    """A user model factory that notes each call."""
    FACTORY_CALLS.append(num_classes)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(inputs.channels * inputs.size**2, num_classes))


class Payload:
    """Unpickling this creates `marker`: proof that pickle ran code."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return open, (str(self.marker), "w")


def test_a_checkpoint_with_a_pickled_payload_is_refused_and_never_runs(tmp_path):
    marker, path = tmp_path / "ran", tmp_path / "evil.pt"
    settings = ModelSettings("mlp-small", 10)
    torch.save(
        {
            "model": {"arch": "mlp-small", "num_classes": 10},
            "state_dict": settings.build().state_dict(),
            "extra": Payload(marker),
        },
        path,
    )
    with pytest.raises(CheckpointError, match="not a readable checkpoint"):
        load_model(path)
    assert not marker.exists()
    torch.load(path, weights_only=False)  # the control: the payload does run when pickle is allowed
    assert marker.exists()
    record("security", check="pickled checkpoint payload refused", passed=True)


def test_ledgers_and_data_archives_with_pickled_objects_are_refused(tmp_path):
    marker = tmp_path / "ran"
    ledger = tmp_path / "predictions.npz"
    np.savez(ledger, class_ids=np.array([Payload(marker)], dtype=object), labels=np.zeros(1, np.int64))
    with pytest.raises(ValueError, match="allow_pickle"):
        read_ledger(ledger)
    data = tmp_path / "data.npz"
    np.savez(data, x=np.zeros((1, 1, 8, 8), np.uint8), y=np.array([Payload(marker)], dtype=object))
    with pytest.raises(DataError, match="cannot read .npz"):
        load_npz(data)
    assert not marker.exists()
    record("security", check="pickled ledger and data archive refused", passed=True)


def test_user_model_factories_run_only_when_the_spec_opts_in(tmp_path):
    arch = "test_security:spy_factory"
    FACTORY_CALLS.clear()
    with pytest.raises(SpecError, match="needs allow_user_factories"):
        parse_spec({"model": "m", "version": "v1", "arch": arch})
    # a checkpoint naming a user factory is just as inert without the opt-in
    settings = ModelSettings(arch, 10)
    path = save_checkpoint(tmp_path / "user.pt", settings.build(allow_user_factories=True), settings)
    FACTORY_CALLS.clear()
    with pytest.raises(ModelError, match="needs allow_user_factories"):
        load_model(path)
    assert FACTORY_CALLS == []
    assert parse_spec({"model": "m", "version": "v1", "arch": arch, "allow_user_factories": True}).arch == arch
    load_model(path, allow_user_factories=True)
    assert FACTORY_CALLS == [10]
    record("security", check="user model factory needs allow_user_factories", passed=True)


def spec_field_names(model: type[BaseModel]) -> set[str]:
    """Every field name of a pydantic model, nested models included."""
    names = set()
    for name, info in model.model_fields.items():
        names.add(name)
        for kind in getattr(info.annotation, "__args__", ()) + (info.annotation,):
            if isinstance(kind, type) and issubclass(kind, BaseModel):
                names |= spec_field_names(kind)
    return names


def test_credentials_come_only_from_the_environment_and_are_never_logged(tmp_path, monkeypatch):
    words = {"secret", "password", "token", "key", "credentials"}  # whole words: `tokenizer` holds none
    assert not {n for n in spec_field_names(UpdateSpec) if words & set(re.split(r"[._]", n))}
    with pytest.raises(SpecError, match="aws_secret_access_key: unknown key"):
        parse_spec({"model": "m", "version": "v1", "arch": "mlp-small", "aws_secret_access_key": "x"})
    for key, value in CREDENTIALS.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    store.configure()
    spec = parse_spec({"model": "creds", "version": "v1", "arch": "mlp-small", "storage": "s3://bucket/runs"})
    record_of_training = TrainRecord(
        name="training",
        seed=0,
        checkpoint="s3://bucket/runs/m.pt",
        history=[{"epoch": 1, "loss": 0.5}],
        steps=1,
        epochs_run=1,
        resumed_from=0,
        steps_run=1,
        val_error_rate=0.5,
        pid=1,
        host="h",
        seconds=1.0,
    )
    with runs.pipeline_run(spec):
        runs.log_training("training", record_of_training)
    client = MlflowClient()
    found = client.search_runs([client.get_experiment_by_name("creds").experiment_id])
    logged = repr([(r.data.params, r.data.tags) for r in found])
    assert len(found) == 2 and "s3://bucket/runs" in logged
    leaked = [key for key, value in CREDENTIALS.items() if value in logged]
    record("security", check="credentials never in MLflow params or tags", passed=not leaked)
    assert not leaked


def test_compose_takes_every_secret_from_env_and_puts_mlflow_behind_basic_auth():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    secret_like = ("PASSWORD", "SECRET", "ACCESS_KEY", "TOKEN")
    for name, service in compose["services"].items():
        environment = service.get("environment") or {}
        if isinstance(environment, list):
            environment = dict(item.split("=", 1) for item in environment)
        for key, value in environment.items():
            if any(word in key for word in secret_like):
                assert str(value).startswith("${") and str(value).endswith("}"), f"{name}.{key} is not from .env"
    command = compose["services"]["mlflow"]["command"]
    assert "--app-name basic-auth" in " ".join(command if isinstance(command, list) else [command])
    record("security", check="compose secrets from .env, MLflow basic auth", passed=True)
