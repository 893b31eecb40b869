"""LoRA adapters on hf:DIR models (`train.adapter`, workers/models/adapters.py): what trains, what a
checkpoint holds, what the spec refuses, and an ELODI update whose replicas and student are adapters."""

from __future__ import annotations

import shutil

import pytest
import torch

from conftest import SPEC_RESOURCES, run_update
from test_hf_models import TEXTS, tiny_bert
from workers.data.input_spec import InputSpec
from workers.models.adapters import AdapterError, LoraSettings, adapter_parameters
from workers.models.checkpoints import ModelSettings, load_model, save_checkpoint
from workers.models.hf import read_directory

LORA = LoraSettings(rank=4, alpha=8, targets=("query", "value"), dropout=0.0)


def settings_of(folder, adapter: LoraSettings | None = LORA) -> ModelSettings:
    found = read_directory(str(folder))
    inputs = InputSpec("text", tokenizer=found.tokenizer, vocab_size=found.vocab_size, max_length=16)
    return ModelSettings(f"hf:{folder}", 3, inputs, found.config, adapter)


def test_only_the_adapter_and_the_head_train_and_it_starts_as_the_base(tmp_path):
    """Rank 4 on query and value of 2 layers of width 32: 2 layers × 2 targets × (4·32 + 32·4) = 1,024
    adapter weights, plus the head's 3·32 + 3; B starts at 0, so the logits are the base model's."""
    folder = tiny_bert(tmp_path / "bert", TEXTS)
    base = settings_of(folder, None).build(seed=3).eval()
    model = settings_of(folder).build(seed=3).eval()
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert len(adapter_parameters(model)) == 8 and sum(p.numel() for p in adapter_parameters(model).values()) == 1024
    assert trainable == set(adapter_parameters(model)) | {"model.classifier.weight", "model.classifier.bias"}
    ids = torch.randint(5, 20, (4, 9))
    assert torch.allclose(model(ids), base(ids), atol=1e-6)


def test_a_checkpoint_holds_base_and_adapter_and_reloads(tmp_path):
    folder = tiny_bert(tmp_path / "bert", TEXTS)
    settings = settings_of(folder)
    model = settings.build(seed=0)
    with torch.no_grad():
        for p in adapter_parameters(model).values():
            p.add_(0.1)  # an adapter that changes the function
    path = save_checkpoint(tmp_path / "model.pt", model, settings)
    shutil.rmtree(folder)  # reloads without the directory
    loaded, read = load_model(path)
    assert read == settings and read.adapter == LORA
    ids = torch.randint(5, 20, (2, 7))
    assert torch.allclose(loaded(ids), model.eval()(ids), atol=1e-6)


def test_a_target_the_model_lacks_is_refused(tmp_path):
    folder = tiny_bert(tmp_path / "bert", TEXTS)
    with pytest.raises(AdapterError, match=r"train.adapter.targets: Target modules \{'qkv'\} not found"):
        settings_of(folder, LoraSettings(targets=("qkv",))).build()


def test_the_spec_takes_an_adapter_for_hf_models_only(tmp_path, spec_document):
    from orchestrator.planning.preflight import preflight
    from pipelines.spec import SpecError, parse_spec

    folder = tiny_bert(tmp_path / "bert", TEXTS)
    data = {"dataset": "tweet-sentiment", "train_limit": 200, "eval_limit": 100}
    adapter = {"rank": 4, "targets": ["query"]}
    spec = parse_spec(spec_document(arch=f"hf:{folder}", data=data, train={"adapter": adapter}))
    assert spec.train.lr == 2e-3 and spec.train.adapter is not None and spec.train.adapter.alpha == 16
    assert parse_spec(spec_document(arch=f"hf:{folder}", data=data, train={})).train.lr == 2e-4  # full FT
    with pytest.raises(SpecError, match="train.adapter: LoRA adapters are for hf:DIR models; arch is text-bag"):
        parse_spec(spec_document(arch="text-bag", data=data, train={"adapter": adapter}))
    with pytest.raises(SpecError, match="train.freeze: an adapter already keeps"):
        parse_spec(spec_document(arch=f"hf:{folder}", data=data, train={"adapter": adapter, "freeze": "backbone"}))
    wrong = parse_spec(spec_document(arch=f"hf:{folder}", data=data, train={"adapter": {"targets": ["qkv"]}}))
    with pytest.raises(SpecError, match="Target modules"):  # found in preflight, before any Ray work
        preflight(wrong)


def test_an_elodi_update_of_adapters_registers_them_with_their_base(ray_cluster, spec_document, tmp_path):
    """v1: a LoRA adapter on the directory's BERT; v2: ELODI (m 2) whose replicas and student are
    adapters. Versions carry `adapter` and `base_digest`; the student's checkpoint reloads without
    the directory and only its adapter and head moved from the pretrained weights; the trained
    replicas' bases are still equal, so as teachers they share one."""
    from mlflow import MlflowClient

    from orchestrator.planning.model_inputs import directory_digest
    from workers.models.hf import pretrained_state
    from workers.storage import fetch_checkpoint
    from workers.teachers.frozen import FrozenModels

    folder = tiny_bert(tmp_path / "bert", TEXTS)
    pretrained = pretrained_state(str(folder))
    common = {
        "model": "hf-lora",
        "arch": f"hf:{folder}",
        "data": {"dataset": "tweet-sentiment", "train_limit": 600, "eval_limit": 300},
        "train": {"epochs": 1, "batch_size": 32, "adapter": {"rank": 4, "alpha": 8}},
        "tokenizer": {"max_length": 32},
        "resources": {**SPEC_RESOURCES, "teacher_actors": 0},
    }
    v1 = run_update(spec_document(**common, version="v1"), tmp_path / "v1")
    elodi = {"name": "elodi", "m": 2, "alpha": 0.5, "k": 3}
    v2 = run_update(spec_document(**common, version="v2", old="hf-lora/1", method=elodi), tmp_path / "v2")
    assert v1.registered_version == "1" and v2.registered_version == "2" and len(v2.replicas) == 2
    tags = MlflowClient().get_model_version("hf-lora", "2").tags
    assert tags["adapter"] == "lora r4 α8 query,value" and tags["base_digest"] == directory_digest(str(folder))
    assert FrozenModels([load_model(fetch_checkpoint(r.checkpoint))[0] for r in v2.replicas]).shared is not None
    shutil.rmtree(folder)
    assert v2.checkpoint is not None
    model, settings = load_model(fetch_checkpoint(v2.checkpoint))
    assert settings.adapter == LoraSettings(rank=4, alpha=8)
    state = model.state_dict()
    moved = {
        name
        for name, value in pretrained.items()
        if not torch.equal(
            state[name.replace(".query.", ".query.base_layer.").replace(".value.", ".value.base_layer.")], value
        )
    }
    assert moved == {"model.classifier.weight", "model.classifier.bias"}
    assert any(v.abs().sum() > 0 for n, v in adapter_parameters(model).items() if "lora_B" in n)  # it learned


def test_bcwi_and_init_old_need_the_old_models_adapter(tmp_path, spec_document):
    """BCWI interpolates the old weights with the new ones, and `init: old` starts from them: an old
    version without the spec's adapter is refused in preflight, one with it is not."""
    from orchestrator.planning.preflight import preflight
    from pipelines.spec import SpecError, parse_spec

    folder = tiny_bert(tmp_path / "bert", TEXTS)
    found = read_directory(str(folder))
    inputs = InputSpec(
        "text", tokenizer=found.tokenizer, vocab_size=found.vocab_size, max_length=32, add_special_tokens=True
    )
    data = {"dataset": "tweet-sentiment", "train_limit": 200, "eval_limit": 100}
    adapter = {"rank": 4, "alpha": 8, "targets": ["query", "value"], "dropout": 0.0}
    for old_adapter, refused in ((None, True), (LORA, False)):
        settings = ModelSettings(f"hf:{folder}", 3, inputs, found.config, old_adapter)
        old = save_checkpoint(tmp_path / f"old-{refused}.pt", settings.build(), settings)
        for fields in ({"method": {"name": "bcwi"}}, {"init": "old"}):
            spec = parse_spec(
                spec_document(arch=f"hf:{folder}", data=data, old=str(old), train={"adapter": adapter}, **fields)
            )
            if refused:
                with pytest.raises(SpecError, match=r"so the adapter must be the old model's \(none\)"):
                    preflight(spec)
            else:
                preflight(spec)


def test_adapter_teachers_share_one_base_and_give_the_ensembles_mean(tmp_path):
    """3 LoRA replicas of one frozen base (their own adapters and heads): FrozenModels holds one base,
    3 adapters and 3 heads, and its one forward over the batch repeated 3 times gives the mean of the
    3 models' logits; once one replica's base differs, it holds the 3 models and gives the same mean."""
    from workers.teachers.frozen import FrozenModels

    folder = tiny_bert(tmp_path / "bert", TEXTS)
    models = [settings_of(folder).build(seed=s).eval() for s in range(3)]
    base = {n: t for n, t in models[0].state_dict().items() if ".lora_" not in n and ".classifier." not in n}
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for model in models:
            model.load_state_dict(base, strict=False)  # the directory's weights, as every replica starts
            for p in adapter_parameters(model).values():
                p.copy_(0.3 * torch.randn(p.shape, generator=generator))  # B ≠ 0: each adapter changes the function
    ids = torch.randint(5, 20, (4, 9), generator=generator)
    ids[0, 5:] = 0  # padding
    with torch.no_grad():
        expected = torch.stack([model(ids) for model in models]).mean(0)
        assert not torch.allclose(models[0](ids), models[1](ids), atol=1e-3)

    teachers = FrozenModels(models)
    assert teachers.shared is not None and not teachers.models and not teachers.stacked
    assert torch.allclose(teachers(ids), expected, atol=1e-5)
    held = sum(t.numel() for t in teachers.shared.state_dict().values())
    one = sum(t.numel() for t in models[0].state_dict().values())
    assert held < 1.1 * one  # one base, not three

    with torch.no_grad():
        models[2].get_parameter("model.bert.embeddings.word_embeddings.weight").add_(0.01)
        expected = torch.stack([model(ids) for model in models]).mean(0)
    apart = FrozenModels(models)
    assert apart.shared is None and len(apart.models) == 3
    assert torch.allclose(apart(ids), expected, atol=1e-5)
