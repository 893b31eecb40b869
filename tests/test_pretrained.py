"""Starting from weights users already have, on colour images at a chosen size: a resnet18 from a
state_dict file on an ImageFolder of RGB PNGs, then its update fine-tuned from the deployed
version's own weights (`init: old`) with a frozen backbone — registered, with NFR reported."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from mlflow import MlflowClient
from PIL import Image

from conftest import SPEC_RESOURCES, run_update
from workers.data.input_spec import InputSpec
from workers.models.checkpoints import ModelSettings, load_model
from workers.storage import fetch_checkpoint

PER_CLASS = 24  # of 10 Fashion-MNIST classes: 240 photos, 168 of them to train at 64² on one core


def colour_photos(folder, fashion_mnist) -> None:
    """An ImageFolder of 36×36 RGB PNGs: Fashion-MNIST garments in a colour per image on a
    background of another, upscaled (real shapes, real colour, a size the spec resizes)."""
    rng = np.random.default_rng(0)
    images, labels = fashion_mnist.train.images, fashion_mnist.train.labels
    for c in range(10):
        (folder / f"class-{c}").mkdir(parents=True)
        chosen = torch.nonzero(labels == c).flatten()[:PER_CLASS]
        for i, index in enumerate(chosen.tolist()):
            grey = images[index, 0].numpy().astype(np.float32)[..., None] / 255
            garment, background = rng.uniform(0.3, 1.0, 3), rng.uniform(0.0, 0.4, 3)
            rgb = (255 * (grey * garment + (1 - grey) * background)).astype(np.uint8)
            Image.fromarray(rgb, "RGB").resize((36, 36), Image.Resampling.BILINEAR).save(
                folder / f"class-{c}" / f"{i}.png"
            )


def test_resnet18_from_a_state_dict_on_rgb_photos_then_fine_tuned_from_old(
    ray_cluster, fashion_mnist, spec_document, tmp_path
):
    colour_photos(tmp_path / "photos", fashion_mnist)
    # the user's own weights: a resnet18 for 4 classes (its head is replaced: the photos have 10)
    start = ModelSettings("resnet18", 4, InputSpec.image(3, 64)).build(seed=11).state_dict()
    torch.save(start, tmp_path / "start.pth")
    common = {
        "model": "photos",
        "arch": "resnet18",
        "data": {"path": str(tmp_path / "photos"), "image_size": 64},
        "train": {"epochs": 1, "batch_size": 56, "lr": 0.02, "seed": 0},
        "resources": {**SPEC_RESOURCES, "teacher_actors": 0},
    }
    v1 = run_update(spec_document(**common, version="v1", init=str(tmp_path / "start.pth")), tmp_path / "v1")
    assert v1.registered_version is not None and v1.checkpoint is not None
    model, settings = load_model(fetch_checkpoint(v1.checkpoint))
    assert settings.inputs.channels == 3 and settings.inputs.size == 64
    assert settings.inputs.mean is not None and len(settings.inputs.mean) == 3  # the photos' own statistics
    trained = model.state_dict()
    assert not torch.equal(trained["layer4.1.conv2.weight"], start["layer4.1.conv2.weight"])  # it trained

    v2 = run_update(
        spec_document(
            **{**common, "train": {**common["train"], "freeze": "backbone", "lr": 0.05}},
            version="v2",
            init="old",
            old="photos/" + v1.registered_version,
        ),
        tmp_path / "v2",
    )
    assert v2.registered_version is not None and v2.checkpoint is not None
    vs_old = v2.metrics["vs_old"]
    assert 0 <= vs_old["nfr"] <= 1 and vs_old["er_old"] == pytest.approx(v1.metrics["error_rate"])
    tuned, tuned_settings = load_model(fetch_checkpoint(v2.checkpoint))
    assert tuned_settings == settings  # it reads what v1 reads: same size, same normalisation
    after = tuned.state_dict()
    backbone = [k for k in after if not k.startswith("fc.")]  # parameters and BatchNorm statistics
    assert all(torch.equal(after[k], trained[k]) for k in backbone)  # started from v1, frozen
    assert not torch.equal(after["fc.weight"], trained["fc.weight"])  # the head alone trained
    assert v2.student is not None and v2.student.parameters["trainable"] == 512 * 10 + 10
    runs = MlflowClient().search_runs(
        [MlflowClient().get_run(v2.run_id).info.experiment_id], "tags.mlflow.runName = 'training'"
    )
    assert runs and runs[0].data.params["parameters.trainable"] == str(512 * 10 + 10)
