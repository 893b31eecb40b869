"""A model outside Congruent as the old model (`old: models:/NAME/VERSION` of any MLflow classifier):
`AnswerTable`, that model's answers on every text the update reads, computed once (on Ray Data, by
the driver's old-answers stage) and looked up here by each text's digest. Its logits are the log of
the foreign model's class probabilities, so softmax gives them back: the old model's logits of KD,
FD-KL and FD-LM and of every NFR count, without the foreign model in any worker."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from workers.data.input_spec import DIGEST_WORDS, TEXT_DIGEST, InputSpec

DIGEST_INPUTS = InputSpec("text", tokenizer=TEXT_DIGEST, vocab_size=2**16 + 1, max_length=DIGEST_WORDS)
SMALLEST_PROBABILITY = 1e-6  # a probability of 0 (or a class the model lacks) as a logit of log(1e-6)


class UnknownTexts(LookupError):
    """Texts the table holds no answer for: the update reads a text its old-answers stage never scored."""


def digest_keys(words: torch.Tensor) -> torch.Tensor:
    """B×8 digest words (`text_digest_words`: each 16-bit word + 1) as B×2 int64 keys, 4 words each,
    the top word cut to 15 bits so that a key stays positive."""
    w = words.long() - 1
    w[:, 0::4] &= 0x7FFF
    first = (w[:, 0] << 48) | (w[:, 1] << 32) | (w[:, 2] << 16) | w[:, 3]
    second = (w[:, 4] << 48) | (w[:, 5] << 32) | (w[:, 6] << 16) | w[:, 7]
    return torch.stack([first, second], dim=1)


def answer_logits(probabilities: np.ndarray) -> torch.Tensor:
    """log p, p clamped to [SMALLEST_PROBABILITY, 1] (float32 N×C)."""
    return torch.from_numpy(np.log(np.clip(probabilities, SMALLEST_PROBABILITY, 1.0)).astype(np.float32))


class AnswerTable(nn.Module):
    """Logits by text: `keys` (N×2 int64, `digest_keys` of each text, sorted by the first column) and
    `logits` (N×C float32). forward(B×8 digest words) → B×C; UnknownTexts for a text not in it."""

    keys: torch.Tensor
    logits: torch.Tensor

    def __init__(self, num_classes: int, inputs: InputSpec = DIGEST_INPUTS) -> None:
        super().__init__()
        if inputs.tokenizer != TEXT_DIGEST:
            raise ValueError("an answer table reads texts by their digest (InputSpec tokenizer TEXT_DIGEST)")
        self.register_buffer("keys", torch.zeros(0, 2, dtype=torch.int64))
        self.register_buffer("logits", torch.zeros(0, num_classes, dtype=torch.float32))

    @classmethod
    def of(cls, words: np.ndarray, logits: torch.Tensor) -> AnswerTable:
        """The table of texts (their `text_digest_words`) and their logits; a text given twice keeps
        its first row."""
        table = cls(logits.shape[1])
        keys = digest_keys(torch.from_numpy(words))
        _, first = np.unique(keys.numpy(), axis=0, return_index=True)
        keep = torch.from_numpy(np.sort(first))
        keys, logits = keys[keep], logits[keep]
        order = torch.argsort(keys[:, 0])
        table.keys, table.logits = keys[order].contiguous(), logits[order].contiguous()
        return table

    def _load_from_state_dict(self, state_dict: Mapping[str, Any], prefix: str, *args: Any) -> None:
        for name in ("keys", "logits"):  # a table's size is its checkpoint's, not the factory's
            if prefix + name in state_dict:
                setattr(self, name, torch.empty_like(state_dict[prefix + name]))
        super()._load_from_state_dict(state_dict, prefix, *args)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        keys = digest_keys(ids[:, :DIGEST_WORDS].to(self.keys.device))
        at = torch.searchsorted(self.keys[:, 0].contiguous(), keys[:, 0].contiguous()).clamp(max=len(self.keys) - 1)
        found = (self.keys[at] == keys).all(dim=1) if len(self.keys) else torch.zeros(len(keys), dtype=torch.bool)
        if not bool(found.all()):
            missing = int((~found).sum())
            raise UnknownTexts(
                f"the old model's answers hold none for {missing} of these {len(keys)} texts "
                "(its old-answers stage scored the splits it was given)"
            )
        return self.logits[at]
