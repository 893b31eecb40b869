"""Starting weights (`init:`) and freezing: what loads, what stays fresh, what is refused."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from workers.data.input_spec import InputSpec
from workers.models.checkpoints import ModelSettings, save_checkpoint
from workers.models.starting_weights import (
    InitError,
    check_available,
    freeze_backbone,
    head_modules,
    initialise,
    load_weights,
    pretrained_normalisation,
    read_state_dict,
    torchvision_file,
    trainable_parameters,
)


def small_cnn(classes: int, seed: int) -> torch.nn.Module:
    return ModelSettings("small-cnn", classes).build(seed=seed)


def test_every_weight_loads_but_a_head_of_another_class_count():
    source, target = small_cnn(10, seed=1), small_cnn(4, seed=2)
    fresh_head = {k: v.clone() for k, v in target.state_dict().items() if k.startswith("13.")}
    report = load_weights(target, source.state_dict(), "source.pt", stem_may_differ=False)
    assert head_modules(target) == ("13",) and set(report.fresh) == {"13.weight", "13.bias"}
    for name, value in target.state_dict().items():
        expected = fresh_head[name] if name in fresh_head else source.state_dict()[name]
        assert torch.equal(value, expected), name


def test_the_same_class_count_loads_the_head_too():
    source, target = small_cnn(10, seed=1), small_cnn(10, seed=2)
    report = load_weights(target, source.state_dict(), "source.pt", stem_may_differ=False)
    assert report.fresh == () and all(torch.equal(target.state_dict()[k], v) for k, v in source.state_dict().items())


def test_a_file_of_another_architecture_names_its_missing_unexpected_and_misshaped_keys():
    mlp = ModelSettings("mlp-small", 10).build(seed=0).state_dict()
    with pytest.raises(InitError) as error:
        load_weights(small_cnn(10, seed=0), mlp, "mlp.pt", stem_may_differ=False)
    message = str(error.value)
    assert message.startswith("init: mlp.pt does not fit this model (missing: 0.weight")
    assert (
        "unexpected: 3.weight, 3.bias" in message
        and "wrong shape: 1.weight (128, 784) for (16,)" in message
        and "\n" not in message
    )
    misshaped = small_cnn(10, seed=0).state_dict()
    misshaped["0.weight"] = torch.zeros(8, 1, 3, 3)
    with pytest.raises(InitError, match=r"wrong shape: 0.weight \(8, 1, 3, 3\) for \(16, 1, 3, 3\)"):
        load_weights(small_cnn(10, seed=0), misshaped, "bad.pt", stem_may_differ=False)


@pytest.mark.parametrize("form", ["pt", "safetensors", "checkpoint", "ddp"])
def test_state_dict_files_in_every_form_read_the_same(tmp_path, form):
    model = small_cnn(10, seed=5)
    state = model.state_dict()
    path = tmp_path / f"weights.{'safetensors' if form == 'safetensors' else 'pth'}"
    if form == "pt":
        torch.save(state, path)
    elif form == "safetensors":
        save_file({k: v.contiguous() for k, v in state.items()}, str(path))
    elif form == "checkpoint":
        path = save_checkpoint(tmp_path / "model.pt", model, ModelSettings("small-cnn", 10))
    else:
        torch.save({f"module.{k}": v for k, v in state.items()}, path)
    read = read_state_dict(str(path))
    assert read.keys() == state.keys() and all(torch.equal(read[k], state[k]) for k in state)


def test_files_that_are_not_state_dicts_are_refused_in_one_line(tmp_path):
    (tmp_path / "text.pth").write_text("not weights")
    torch.save({"lr": 0.1}, tmp_path / "settings.pt")
    with pytest.raises(InitError, match="text.pth: not a readable state_dict"):
        read_state_dict(str(tmp_path / "text.pth"))
    with pytest.raises(InitError, match="settings.pt: not a state_dict"):
        read_state_dict(str(tmp_path / "settings.pt"))
    with pytest.raises(InitError, match="no such file"):
        check_available("small-cnn", str(tmp_path / "absent.pt"))


def test_torchvision_weights_come_from_its_cache_and_never_the_network(tmp_path, monkeypatch):
    """Without the cached file: one line naming the file torchvision expects and where. With it (a
    file in torchvision's own format, here the architecture's fresh weights), every tensor loads
    but the 7×7 stem (Congruent's ResNets read small images through a 3×3 one) and the 1000-class
    head."""
    from torchvision.models import resnet18

    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    expected = tmp_path / "torch" / "hub" / "checkpoints" / "resnet18-f37072fd.pth"
    assert torchvision_file("resnet18", "IMAGENET1K_V1") == expected
    with pytest.raises(InitError) as error:
        check_available("resnet18", "IMAGENET1K_V1")
    assert f"needs torchvision's file resnet18-f37072fd.pth in {expected.parent}" in str(error.value)
    with pytest.raises(InitError, match="has no torchvision weights 'IMAGENET9K'"):
        check_available("resnet18", "IMAGENET9K")
    with pytest.raises(InitError, match="only arch resnet18, resnet34, resnet50"):
        check_available("resnet20", "IMAGENET1K_V1")

    expected.parent.mkdir(parents=True)
    imagenet = resnet18(weights=None).state_dict()
    torch.save(imagenet, expected)
    model = ModelSettings("resnet18", 7, InputSpec.image(3, 32)).build(seed=0)
    report = initialise(model, "resnet18", "IMAGENET1K_V1")
    assert set(report.fresh) == {"conv1.weight", "fc.weight", "fc.bias"}
    assert torch.equal(model.state_dict()["layer3.1.conv2.weight"], imagenet["layer3.1.conv2.weight"])
    assert report.loaded == len(imagenet) - 3


def test_pretrained_normalisation_is_the_weights_own():
    mean, std = pretrained_normalisation("resnet18", "IMAGENET1K_V1", 3)
    assert mean == pytest.approx((0.485, 0.456, 0.406)) and std == pytest.approx((0.229, 0.224, 0.225))
    grey_mean, grey_std = pretrained_normalisation("resnet18", "IMAGENET1K_V1", 1)
    assert grey_mean == pytest.approx((0.449,)) and grey_std == pytest.approx((0.226,))


def test_a_frozen_backbone_does_not_move_and_the_head_does():
    model = small_cnn(10, seed=0)
    total = sum(p.numel() for p in model.parameters())
    assert freeze_backbone(model) == 64 * 10 + 10 == trainable_parameters(model) < total
    before = {k: v.clone() for k, v in model.state_dict().items()}
    optimiser = torch.optim.SGD([p for p in model.parameters()], lr=0.5, momentum=0.9, weight_decay=5e-4)
    images = torch.randn(16, 1, 28, 28)
    torch.nn.functional.cross_entropy(model(images), torch.arange(16) % 10).backward()
    optimiser.step()
    moved = {k for k, v in model.named_parameters() if not torch.equal(v, before[k])}
    assert moved == {"13.weight", "13.bias"}
    buffers = dict(model.named_buffers())
    assert any("running_mean" in k for k in buffers)
    assert all(torch.equal(v, before[k]) for k, v in buffers.items())  # BatchNorm statistics stay the old model's


def test_a_frozen_backbone_computes_in_training_what_it_computes_in_eval():
    model = small_cnn(10, seed=0)
    freeze_backbone(model)
    images = torch.randn(8, 1, 28, 28)
    with torch.no_grad():
        trained_mode = model.train()(images)
        assert torch.equal(trained_mode, model.eval()(images))


def test_a_frozen_backbone_runs_without_dropout_while_its_head_trains():
    """text-cnn's dropout sits in the backbone (on the pooled features): frozen, the model gives the
    same logits twice in training mode, and only its `head` trains."""
    from workers.data.tokenizer import text_input
    from workers.models.architectures import build_model

    inputs = text_input(["a frozen backbone", "keeps its features", "the head learns"] * 5, vocab_size=100)
    model = build_model("text-cnn", 3, inputs, seed=0)
    assert head_modules(model) == ("head",)
    freeze_backbone(model)
    ids = torch.randint(2, inputs.vocab_size, (8, 12))
    with torch.no_grad():
        model.train()
        assert torch.equal(model(ids), model(ids))
    assert {n for n, p in model.named_parameters() if p.requires_grad} == {"head.weight", "head.bias"}
