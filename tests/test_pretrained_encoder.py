"""The pretrained encoder `make` installs (all-MiniLM-L6-v2, infra/data_assets.py) fine-tuned through
`congruent run` with the hf: recipe, on a slice of Reuters R8 that `make` installs too: it learns
the topics from a few hundred stories, and its registered version reloads without the directory."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from conftest import cli_runs_here
from workers.data.text_tables import REUTERS_R8_CSV
from workers.models.hf import MINILM_DIR


def test_make_installed_the_encoder_with_its_licence_and_the_text_sets():
    from workers.models.hf import read_directory

    assert {"config.json", "model.safetensors", "tokenizer.json", "LICENSE", "NOTICE"} <= {
        p.name for p in MINILM_DIR.iterdir()
    }
    assert "Apache-2.0" in (MINILM_DIR / "NOTICE").read_text()
    found = read_directory(str(MINILM_DIR))
    assert json.loads(found.config)["num_hidden_layers"] == 6 and found.vocab_size == 30522
    assert REUTERS_R8_CSV.read_text().startswith("id,label,text\n")


def test_minilm_fine_tuned_through_congruent_run_registers_and_reloads_without_its_directory(
    ray_cluster, tmp_path, monkeypatch, capsys
):
    """300 R8 stories, 2 epochs at the recipe's schedule (lr raised to 2e-4 for so few steps), 64 tokens:
    eval ER under half the majority class's error; the registered checkpoint, fetched after the
    directory is gone, gives the run's own eval ER on the same split."""
    from mlflow import MlflowClient

    from orchestrator.planning.model_inputs import text_inputs
    from orchestrator.planning.plan import data_request
    from pipelines.spec import parse_spec
    from workers.metrics import error_rate
    from workers.models.checkpoints import load_model
    from workers.models.predict import predict_logits
    from workers.storage import fetch_checkpoint
    from workers.tasks.resolve import cached_splits

    folder = tmp_path / "minilm"
    shutil.copytree(MINILM_DIR, folder)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_REGISTRY_URI", uri)
    document = {
        "model": "r8-minilm",
        "version": "v1",
        "arch": f"hf:{folder}",
        "storage": str(tmp_path / "storage"),
        # val: 2 % of the pool (~110 stories, validated after each epoch), not 10 % (~560: more than training cost)
        "data": {
            "path": str(REUTERS_R8_CSV),
            "id_column": "id",
            "train_limit": 300,
            "eval_limit": 200,
            "val_fraction": 0.02,
        },
        "train": {"epochs": 2, "batch_size": 16, "lr": 2e-4},
        "tokenizer": {"max_length": 64},
        "resources": {"student": {"cpus": 1}, "fresh_stage_workers": False},  # a node of the test cluster has one CPU
    }
    result = cli_runs_here({"v1": document}, tmp_path, ray_cluster.address, capsys)["v1"]
    assert result["registered_version"] == "1"
    spec = parse_spec(document)
    splits = cached_splits(data_request(spec))
    majority = torch.bincount(splits.eval.labels).max().item() / len(splits.eval)
    assert result["error_rate"] < 0.5 * (1 - majority), (result["error_rate"], majority)
    inputs = text_inputs(spec, splits.train)
    shutil.rmtree(folder)
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    version = client.get_model_version("r8-minilm", "1")
    checkpoint = client.download_artifacts(version.run_id, "checkpoint/model.pt", str(tmp_path / "download"))
    model, settings = load_model(fetch_checkpoint(checkpoint))
    assert settings.inputs == inputs and settings.arch == f"hf:{folder}"
    predictions = predict_logits(model, splits.eval, inputs=settings.inputs).argmax(1)
    assert error_rate(predictions, splits.eval.labels) == pytest.approx(result["error_rate"])
