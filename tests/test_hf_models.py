"""`arch: hf:DIR`: a Hugging Face sequence classifier and its tokenizer from a local directory —
here a tiny, randomly initialised 2-layer BERT (hidden size 32) built in a temp dir, as a user's
`save_pretrained` would leave it. Nothing reaches the hub."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from conftest import SPEC_RESOURCES, run_update
from workers.data.input_spec import InputSpec
from workers.data.tokenizer import encode_texts
from workers.models.checkpoints import ModelSettings, load_model
from workers.models.hf import HfError, pretrained_state, read_directory
from workers.names import check_architecture, modality_of

TEXTS = ["the flight was late again", "great crew, lovely flight", "lost my bag", "thanks for the upgrade"] * 50


def tiny_bert(folder: Path, texts: list[str], labels: int = 2, pad_first: bool = True) -> Path:
    """A BERT directory: a WordPiece tokenizer trained on `texts` ([PAD] = 0 unless not
    `pad_first`) and a 2-layer, 2-head, hidden-32 BertForSequenceClassification of `labels` classes."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import BertConfig, BertForSequenceClassification, PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    if not pad_first:
        specials = specials[1:] + specials[:1]
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.train_from_iterator(texts, trainers.WordPieceTrainer(vocab_size=2000, special_tokens=specials))
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )
    fast.save_pretrained(folder)
    config = BertConfig(
        vocab_size=tokenizer.get_vocab_size(),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        num_labels=labels,
    )
    torch.manual_seed(0)
    BertForSequenceClassification(config).save_pretrained(folder)
    return folder


def test_hf_names_read_text_and_need_a_directory():
    assert modality_of("hf:/models/bert") == "text"
    check_architecture("hf:/models/bert")  # not a user factory despite its colon
    with pytest.raises(ValueError, match="hf: needs the directory"):
        check_architecture("hf:")


def test_the_directory_gives_config_tokenizer_and_weights(tmp_path):
    folder = tiny_bert(tmp_path / "bert", TEXTS)
    found = read_directory(str(folder))
    spec = InputSpec(
        "text", tokenizer=found.tokenizer, vocab_size=found.vocab_size, max_length=5, add_special_tokens=True
    )
    ids, lengths = encode_texts(spec, ["lost my bag", "the flight was late again"])
    cls, sep = 2, 3
    assert ids[0, 0] == cls and ids[0, int(lengths[0]) - 1] == sep
    assert int(lengths[1]) == 5 and ids[1, 4] == sep  # cut at max_length, [SEP] kept
    settings = ModelSettings(f"hf:{folder}", 3, spec, found.config)
    model = settings.build(seed=1)
    state = pretrained_state(str(folder))
    assert state["model.classifier.weight"].shape == (2, 32)  # the directory's 2 labels
    assert model.state_dict()["model.classifier.weight"].shape == (3, 32)  # the data's 3 classes
    assert torch.equal(
        settings.build(seed=1).state_dict()["model.bert.encoder.layer.0.attention.self.query.weight"],
        model.state_dict()["model.bert.encoder.layer.0.attention.self.query.weight"],
    )
    logits = model.eval()(ids)
    assert logits.shape == (2, 3)
    padded = torch.cat([ids, torch.zeros(2, 3, dtype=ids.dtype)], 1)  # padding never changes the logits
    assert torch.allclose(model(padded), logits, atol=1e-5)


def test_a_directory_saved_over_is_read_again(tmp_path):
    """`read_directory` is cached by what the directory holds, not by its path: a model saved over
    the same directory with another tokenizer gives the new tokenizer."""
    folder = tiny_bert(tmp_path / "model", TEXTS)
    first = read_directory(str(folder))
    shutil.rmtree(folder)
    tiny_bert(folder, ["an entirely different vocabulary of words", "nothing like the flights"] * 50)
    second = read_directory(str(folder))
    assert second.tokenizer != first.tokenizer
    assert read_directory(str(folder)) == second


def test_a_frozen_distilbert_trains_its_whole_classification_head():
    """DistilBERT's head is pre_classifier + classifier (the modules outside its base model): frozen,
    both train, and the backbone's dropout is off."""
    from transformers import DistilBertConfig, DistilBertForSequenceClassification

    from workers.models.hf import HfClassifier
    from workers.models.starting_weights import freeze_backbone, head_modules

    config = DistilBertConfig(vocab_size=50, dim=32, n_layers=1, n_heads=2, hidden_dim=64, num_labels=3, dropout=0.5)
    torch.manual_seed(0)
    model = HfClassifier(DistilBertForSequenceClassification(config))
    assert set(head_modules(model)) == {"model.pre_classifier", "model.classifier", "model.dropout"}
    freeze_backbone(model)
    trainable = {name.rsplit(".", 1)[0] for name, p in model.named_parameters() if p.requires_grad}
    assert trainable == {"model.pre_classifier", "model.classifier"}
    ids = torch.randint(1, 50, (4, 6))
    model.train()
    with torch.no_grad():
        features = model.model.distilbert(input_ids=ids).last_hidden_state
        assert torch.equal(features, model.model.distilbert(input_ids=ids).last_hidden_state)


def test_a_tokenizer_that_pads_with_another_id_is_refused(tmp_path):
    folder = tiny_bert(tmp_path / "bert", TEXTS, pad_first=False)
    with pytest.raises(HfError, match="padding token has id 4; Congruent pads with id 0"):
        read_directory(str(folder))
    with pytest.raises(HfError, match="no such directory"):
        read_directory(str(tmp_path / "absent"))


def test_an_hf_text_update_from_v1_to_v2_with_elodi_registers_both(ray_cluster, spec_document, tmp_path):
    """v1: the directory's BERT fine-tuned on tweets; v2: ELODI (m 2) against v1. Both registered;
    the registered checkpoints carry the directory's config and tokenizer and load without it."""
    from mlflow import MlflowClient

    from workers.data import load_splits
    from workers.storage import fetch_checkpoint

    tweets = load_splits("tweet-sentiment", train_limit=500)
    folder = tiny_bert(tmp_path / "bert", list(tweets.train.texts))
    common = {
        "model": "hf-tweets",
        "arch": f"hf:{folder}",
        "data": {"dataset": "tweet-sentiment", "train_limit": 500, "eval_limit": 200},
        "train": {"epochs": 1, "batch_size": 32, "lr": 0.05, "seed": 0},
        "tokenizer": {"max_length": 48},
        "resources": {**SPEC_RESOURCES, "teacher_actors": 0},
    }
    v1 = run_update(spec_document(**common, version="v1"), tmp_path / "v1")
    v2 = run_update(
        spec_document(
            **common,
            version="v2",
            old="hf-tweets/" + str(v1.registered_version),
            method={"name": "elodi", "m": 2, "alpha": 0.5, "k": 3},
        ),
        tmp_path / "v2",
    )
    assert v1.registered_version is not None and v2.registered_version is not None
    assert 0 <= v2.metrics["vs_old"]["nfr"] <= 1 and len(v2.replicas) == 2
    found = read_directory(str(folder))
    shutil.rmtree(folder)  # a registered version needs no directory
    for result in (v1, v2):
        assert result.checkpoint is not None
        model, settings = load_model(fetch_checkpoint(result.checkpoint))
        assert settings.config == found.config and settings.inputs.tokenizer == found.tokenizer
        assert settings.inputs.add_special_tokens and settings.inputs.max_length == 48
        assert model(torch.tensor([[2, 10, 11, 3]])).shape == (1, 3)
    client = MlflowClient()
    version = client.get_model_version("hf-tweets", str(v2.registered_version))
    artifacts = {a.path for a in client.list_artifacts(version.run_id, "checkpoint")}
    assert artifacts == {"checkpoint/model.pt", "checkpoint/config.json", "checkpoint/tokenizer.json"}


def test_replicas_of_a_directory_saved_over_are_other_replicas(spec_document, tmp_path):
    """The replicas' key holds the directory's content, not its path: a model saved over the same
    directory trains new replicas, the same content reuses them."""
    from orchestrator.planning.model_inputs import directory_digest
    from orchestrator.planning.preflight import preflight
    from pipelines.spec import parse_spec

    folder = tiny_bert(tmp_path / "bert", TEXTS)
    document = spec_document(
        model="hf-key",
        version="v1",
        arch=f"hf:{folder}",
        data={"dataset": "tweet-sentiment", "train_limit": 200, "eval_limit": 100},
        method={"name": "elodi", "m": 1},
    )

    def replica_uri() -> str:
        return preflight(parse_spec(document)).replica_jobs()[0].checkpoint_uri

    first, digest = replica_uri(), directory_digest(str(folder))
    assert replica_uri() == first
    torch.manual_seed(1)  # other weights under the same names
    from transformers import BertForSequenceClassification

    BertForSequenceClassification.from_pretrained(folder, local_files_only=True).apply(
        lambda m: torch.nn.init.normal_(m.weight) if isinstance(m, torch.nn.Linear) else None
    ).save_pretrained(folder)
    assert directory_digest(str(folder)) != digest and replica_uri() != first
