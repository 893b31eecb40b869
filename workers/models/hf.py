"""Hugging Face sequence classifiers from a local directory: `arch: hf:DIR`.

DIR holds what `save_pretrained` writes for a model and its tokenizer: config.json, the weights
(model.safetensors or pytorch_model.bin) and a fast tokenizer (tokenizer.json). Nothing reaches the
hub: every load is `local_files_only`. A version's model is the directory's, with a classifier head
for the data's classes (fresh when the directory's head has another class count), fine-tuned. Its
checkpoint carries the config (`ModelSettings.config`) and the tokenizer (`InputSpec.tokenizer`), so
a registered version loads, serves and teaches without DIR.

Congruent pads token ids with 0 and reads `ids != 0` as the attention mask, so the tokenizer's
padding token must have id 0 (BERT's [PAD] has).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch
from torch import nn

from workers.digests import folder_sha256
from workers.errors import first_line
from workers.names import HF_PREFIX

MINILM_DIR = Path("/usr/share/datasets/all-MiniLM-L6-v2")  # `make` installs it: all-MiniLM-L6-v2 (Apache-2.0)


class HfError(ValueError):
    """A directory that cannot serve as a model; the message names it and the problem."""


def hf_directory(arch: str) -> Path:
    """DIR of `hf:DIR`."""
    return Path(arch.removeprefix(HF_PREFIX))


@dataclass(frozen=True)
class HfDirectory:
    config: str  # the model's config.json, as JSON text
    tokenizer: str  # the fast tokenizer's JSON (tokenizers.Tokenizer.to_str())
    vocab_size: int  # ids lie below it (the tokenizer's added tokens included)


def _quiet_transformers() -> None:
    """transformers' own advice lines ("you should train this model…", download bars) are not ours to print."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".h5", ".msgpack", ".ckpt")  # read by pretrained_state


def description_digest(directory: str) -> str:
    """sha256 over the directory's files but its weights — config, tokenizer, special tokens — by
    relative name and bytes (what `read_directory` reads); "" when there is no such directory."""
    path = Path(directory)
    if not path.is_dir():
        return ""
    return folder_sha256(path, keep=lambda file: not file.name.endswith(WEIGHT_SUFFIXES))


def read_directory(directory: str) -> HfDirectory:
    """The config and tokenizer of a local model directory; HfError (one line) when it has none.
    Read once per content: a directory saved over with another config or tokenizer is read again."""
    return _read_directory(directory, description_digest(directory))


@lru_cache(maxsize=4)
def _read_directory(directory: str, digest: str) -> HfDirectory:
    _quiet_transformers()
    from transformers import AutoConfig, AutoTokenizer

    path = Path(directory)
    if not path.is_dir():
        raise HfError(f"hf:{directory}: no such directory")
    try:
        config = AutoConfig.from_pretrained(path, local_files_only=True)
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError, KeyError) as e:
        raise HfError(f"hf:{directory}: not a model directory with its tokenizer ({first_line(e)})") from None
    if not getattr(tokenizer, "is_fast", False):
        raise HfError(f"hf:{directory}: needs a fast tokenizer (tokenizer.json)")
    if tokenizer.pad_token_id != 0:
        raise HfError(
            f"hf:{directory}: the tokenizer's padding token has id {tokenizer.pad_token_id}; Congruent pads with id 0"
        )
    return HfDirectory(config.to_json_string(), tokenizer.backend_tokenizer.to_str(), len(tokenizer))


class HfClassifier(nn.Module):
    """A transformers sequence classifier reading B×L token ids (0 = padding): logits B×C."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    @property
    def head_modules(self) -> tuple[str, ...]:
        """The classification head: every module of the transformers model outside its base model
        (`base_model_prefix`: BERT's `bert`, DistilBERT's `distilbert`), e.g. `classifier`, and
        DistilBERT's `pre_classifier` too."""
        base = self.model.base_model_prefix
        return tuple(f"model.{name}" for name, _ in self.model.named_children() if name != base)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        ids = ids.long()
        return self.model(input_ids=ids, attention_mask=(ids != 0).long()).logits


def build_hf(config_json: str, num_classes: int) -> HfClassifier:
    """The architecture of `config_json` with a head of `num_classes`, freshly initialised (the
    caller seeds torch); weights come from `pretrained_state` or a checkpoint."""
    _quiet_transformers()
    from transformers import AutoConfig, AutoModelForSequenceClassification

    values = json.loads(config_json)
    model_type = values.pop("model_type")
    for stale in ("id2label", "label2id", "num_labels"):  # the data's classes decide the head
        values.pop(stale, None)
    config = AutoConfig.for_model(model_type, num_labels=num_classes, **values)
    return HfClassifier(AutoModelForSequenceClassification.from_config(config))


def pretrained_state(directory: str) -> dict[str, torch.Tensor]:
    """The directory's weights, named as in `HfClassifier` (`model.…`)."""
    _quiet_transformers()
    from transformers import AutoModelForSequenceClassification

    try:
        model = AutoModelForSequenceClassification.from_pretrained(Path(directory), local_files_only=True)
    except (OSError, ValueError) as e:
        raise HfError(f"hf:{directory}: cannot load its weights ({first_line(e)})") from None
    return {f"model.{k}": v for k, v in model.state_dict().items()}
