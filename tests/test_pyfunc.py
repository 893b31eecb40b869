"""A registered version is an MLflow pyfunc model on raw inputs (orchestrator/tracking/pyfunc_model.py):
`mlflow.pyfunc.load_model` on a text version trained through the pipeline answers a DataFrame of
raw texts, an image version one of PNG bytes (or paths), with the classes `congruent serve`'s
replicas answer; `mlflow models serve` answers a request; artifacts changed since registration and a
DataFrame without the version's column are refused in one line."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
from mlflow.exceptions import MlflowException

from conftest import run_update
from orchestrator.serving.predictor import Predictor
from orchestrator.tracking import registry
from orchestrator.tracking.version_refs import VersionRef
from processes import free_port
from reliability_records import record
from test_serving import png
from workers.data import load_splits


def served_answers(model: str, payloads: list) -> list[int]:
    """What a `congruent serve` replica of version 1 answers (its Predictor, as VersionModel builds it)."""
    return [a.class_id for a in Predictor(registry.checkpoint_of(VersionRef(model, "1"))).answer(payloads)]


def test_a_text_version_loads_as_a_pyfunc_that_reads_raw_texts_from_its_column(ray_cluster, spec_document, tmp_path):
    model = f"pyfunc-text-{tmp_path.name}"[-60:]
    data = {"dataset": "tweet-sentiment", "train_limit": 1500, "eval_limit": 300}
    train = {"epochs": 4, "lr": 0.5, "batch_size": 64, "seed": 0}  # as test_text_pipeline's text-bag
    run_update(spec_document(model=model, version="v1", arch="text-bag", data=data, train=train), tmp_path / "v1")
    texts = list(load_splits("tweet-sentiment").eval.texts[:40])
    loaded = mlflow.pyfunc.load_model(f"models:/{model}/1")
    assert loaded.metadata.get_input_schema().input_names() == ["text"]  # the spec's text column
    answered = loaded.predict(pd.DataFrame({"text": texts}))
    assert list(answered.columns) == ["class", "name", "probability"]
    assert answered["class"].tolist() == served_answers(model, texts)
    assert len(set(answered["class"])) > 1  # a trained model, not one class for everything
    names = Predictor(registry.checkpoint_of(VersionRef(model, "1"))).class_names
    assert names and answered["name"].tolist() == [names[k] for k in answered["class"]]
    assert ((answered["probability"] > 0) & (answered["probability"] <= 1)).all()
    with pytest.raises(MlflowException, match=r"missing inputs \['text'\]"):  # MLflow's check of the signature
        loaded.predict(pd.DataFrame({"review": texts[:2], "stars": [1, 5]}))


def test_an_image_version_as_a_pyfunc_and_behind_mlflow_models_serve(
    ray_cluster, spec_document, tmp_path, fashion_mnist
):
    model = f"pyfunc-image-{tmp_path.name}"[-60:]
    run_update(spec_document(model=model, version="v1", data={"train_limit": 1000, "eval_limit": 300}), tmp_path / "v1")
    encoded = [png(image[0].numpy()) for image in fashion_mnist.eval.images[5000:5040]]
    expected = served_answers(model, encoded)
    loaded = mlflow.pyfunc.load_model(f"models:/{model}/1")
    assert loaded.predict(pd.DataFrame({"image": encoded}))["class"].tolist() == expected
    files = []
    for i, image in enumerate(encoded[:5]):
        files.append(tmp_path / f"{i}.png")
        files[-1].write_bytes(image)
    assert loaded.predict(pd.DataFrame({"image": [str(f) for f in files]}))["class"].tolist() == expected[:5]
    with pytest.raises(MlflowException, match=r"^input 1: cannot read image"):  # one line naming the row
        loaded.predict(pd.DataFrame({"image": [encoded[0], b"\x89PNG not really"]}))

    # artifacts changed since registration: the checkpoint no longer has its recorded sha256
    local = Path(mlflow.artifacts.download_artifacts(f"models:/{model}/1", dst_path=str(tmp_path / "copy")))
    [checkpoint] = list(local.rglob("model.pt"))
    checkpoint.write_bytes(checkpoint.read_bytes()[:-16] + bytes(16))
    with pytest.raises(MlflowException, match="changed since"):
        mlflow.pyfunc.load_model(str(local))
    # the hash is the registry's, not the artifacts' own: a version tag that disagrees refuses the load
    client, tag = mlflow.MlflowClient(), "sha256.checkpoint/model.pt"
    recorded = client.get_model_version(model, "1").tags[tag]
    client.set_model_version_tag(model, "1", tag, "0" * 64)
    try:
        with pytest.raises(MlflowException, match="the registry recorded"):
            mlflow.pyfunc.load_model(f"models:/{model}/1")
        client.delete_model_version_tag(model, "1", tag)
        with pytest.raises(MlflowException, match="records its checkpoint's sha256"):
            mlflow.pyfunc.load_model(f"models:/{model}/1")
    finally:
        client.set_model_version_tag(model, "1", tag, recorded)
    record("serving_security", check="a pyfunc whose checkpoint differs from the registry's version tag, or whose "
           "version has none, refuses to load", passed=True)  # fmt: skip

    # any MLflow tool: `mlflow models serve` from the registry, this environment's packages
    port = free_port()
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "models", "serve", "-m", f"models:/{model}/1", "--env-manager", "local",
         "-p", str(port), "-h", "127.0.0.1"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    try:
        body = {"dataframe_split": {"columns": ["image"], "data": [[base64.b64encode(b).decode()] for b in encoded]}}
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/invocations", json.dumps(body).encode(), {"content-type": "application/json"}
        )
        deadline, answer = time.monotonic() + 180, None
        while answer is None and time.monotonic() < deadline and server.poll() is None:
            try:
                with urllib.request.urlopen(request, timeout=60) as response:
                    answer = json.loads(response.read())
            except OSError:  # not listening yet
                time.sleep(1)
        assert answer is not None, server.stderr.read().decode()[-2000:] if server.poll() is not None else "no answer"
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=60)
    assert [p["class"] for p in answer["predictions"]] == expected
    assert np.allclose(
        [p["probability"] for p in answer["predictions"]],
        loaded.predict(pd.DataFrame({"image": encoded}))["probability"],
    )
