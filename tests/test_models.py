"""Model registry, checkpoints and BCWI interpolation."""

import pytest
import torch
from torch import nn

from workers.data.input_spec import InputSpec
from workers.models.architectures import ModelError, build_model
from workers.models.checkpoints import CheckpointError, ModelSettings, load_model, save_checkpoint
from workers.names import IMAGE_ARCHITECTURES
from workers.training.bcwi import interpolate_state_dicts


def tiny_factory(num_classes, inputs):
    return nn.Sequential(nn.Flatten(), nn.Linear(inputs.channels * inputs.size * inputs.size, num_classes))


@pytest.mark.parametrize("arch", IMAGE_ARCHITECTURES)
@pytest.mark.parametrize("channels,size", [(1, 28), (3, 32)])
def test_every_image_architecture_maps_images_to_class_logits(arch, channels, size):
    model = build_model(arch, num_classes=7, inputs=InputSpec.image(channels, size), seed=0).eval()
    with torch.no_grad():
        assert model(torch.randn(2, channels, size, size)).shape == (2, 7)


def test_same_seed_same_weights_other_seed_other_weights():
    a, b, c = (build_model("resnet8", 10, seed=s).state_dict() for s in (3, 3, 4))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a if a[k].is_floating_point())


def test_build_model_leaves_global_rng_alone():
    torch.manual_seed(123)
    expected = torch.rand(1)
    torch.manual_seed(123)
    build_model("small-cnn", 10, seed=9)
    assert torch.equal(torch.rand(1), expected)


def test_unknown_architecture_and_user_factories_need_opt_in():
    with pytest.raises(ModelError, match="unknown architecture"):
        build_model("resnet9000", 10)
    with pytest.raises(ModelError, match="allow_user_factories"):
        build_model("tests.test_models:tiny_factory", 10)
    model = build_model("tests.test_models:tiny_factory", 10, allow_user_factories=True)
    assert model(torch.zeros(1, 1, 28, 28)).shape == (1, 10)
    with pytest.raises(ModelError, match="cannot import"):
        build_model("tests.test_models:nothing_here", 10, allow_user_factories=True)


def test_a_checkpoint_written_before_text_inputs_still_loads(tmp_path):
    """Checkpoints before text recorded `in_channels` and `image_size` in place of `inputs`."""
    settings = ModelSettings("lenet", 10, InputSpec.image(3, 32))
    model = settings.build(seed=2)
    path = tmp_path / "old-format.pt"
    torch.save(
        {
            "model": {"arch": "lenet", "num_classes": 10, "in_channels": 3, "image_size": 32},
            "state_dict": model.state_dict(),
        },
        path,
    )
    loaded, loaded_settings = load_model(path)
    assert loaded_settings == settings
    assert all(torch.equal(v, loaded.state_dict()[k]) for k, v in model.state_dict().items())


def test_checkpoint_round_trip_and_clear_errors(tmp_path):
    settings = ModelSettings("small-cnn", 10)
    model = settings.build(seed=1)
    path = save_checkpoint(tmp_path / "m.pt", model, settings, fingerprint="abc")
    loaded, loaded_settings = load_model(path)
    assert loaded_settings == settings and not loaded.training
    assert all(torch.equal(v, loaded.state_dict()[k]) for k, v in model.state_dict().items())

    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(path.read_bytes()[:200])
    with pytest.raises(CheckpointError, match="not a readable checkpoint"):
        load_model(truncated)
    other = ModelSettings("lenet", 10)
    wrong = tmp_path / "wrong.pt"
    torch.save({"model": {"arch": "small-cnn", "num_classes": 10}, "state_dict": other.build().state_dict()}, wrong)
    with pytest.raises(CheckpointError, match="do not fit architecture 'small-cnn'"):
        load_model(wrong)
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        load_model(tmp_path / "missing.pt")


def test_checkpoints_refuse_pickled_objects(tmp_path):
    path = tmp_path / "pickled.pt"
    torch.save({"model": {"arch": "mlp", "num_classes": 10}, "state_dict": {}, "payload": ModelError("x")}, path)
    with pytest.raises(CheckpointError, match="not a readable checkpoint"):
        load_model(path)


def test_bcwi_interpolates_parameters_and_buffers():
    old = build_model("small-cnn", 10, seed=0)
    new = build_model("small-cnn", 10, seed=1)
    with torch.no_grad():
        old.train()(torch.randn(8, 1, 28, 28))  # a train-mode forward moves BN running statistics
    mixed = interpolate_state_dicts(old.state_dict(), new.state_dict(), alpha=0.25)
    for name, value in new.state_dict().items():
        if value.is_floating_point():
            assert torch.allclose(mixed[name], 0.25 * old.state_dict()[name] + 0.75 * value), name
        else:
            assert torch.equal(mixed[name], value), name
    assert "1.running_mean" in mixed
    ends = interpolate_state_dicts(old.state_dict(), new.state_dict(), alpha=1.0)
    assert all(torch.equal(ends[k], old.state_dict()[k]) for k in ends if ends[k].is_floating_point())


def test_bcwi_rejects_other_architectures():
    with pytest.raises(ValueError, match="one architecture"):
        interpolate_state_dicts(build_model("mlp", 10).state_dict(), build_model("small-cnn", 10).state_dict(), 0.5)
    with pytest.raises(ValueError, match="alpha"):
        interpolate_state_dicts({}, {}, 1.5)
