"""Text tokenizers: trained on a version's train split, stored as Hugging Face `tokenizers` JSON.

The JSON travels in `InputSpec.tokenizer`, so a checkpoint carries its own tokenizer. Ids: 0 is
"[PAD]" (what every text model treats as padding), 1 is "[UNK]", then the learned vocabulary —
WordPiece (Schuster & Nakajima 2012, as in BERT) or byte-pair encoding (Sennrich et al. 2016).
"""

from __future__ import annotations

import json
import string
import unicodedata
from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Literal

import numpy as np
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

from workers.data.input_spec import DIGEST_WORDS, TEXT_DIGEST, InputSpec

if TYPE_CHECKING:
    import torch

TokenizerKind = Literal["wordpiece", "bpe"]
PAD, UNK = "[PAD]", "[UNK]"
PAD_ID, UNK_ID = 0, 1


def train_tokenizer(texts: Sequence[str], kind: TokenizerKind = "wordpiece", vocab_size: int = 8000) -> str:
    """A `kind` tokenizer of at most `vocab_size` ids trained on `texts`, as JSON: NFD, lowercase,
    accents stripped, split at whitespace and punctuation; the same texts give the same JSON."""
    texts = list(texts)
    normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.Lowercase(), normalizers.StripAccents()])
    specials = [PAD, UNK]
    trainer: trainers.Trainer
    if kind == "wordpiece":
        tokenizer = Tokenizer(models.WordPiece(unk_token=UNK))
        # The trainer numbers the "##c" pieces in hash-map order, and ids break ties between equally
        # frequent merges, so the vocabulary changed from run to run (huggingface/tokenizers#1794).
        # Numbered first, in sorted order, as if special tokens, they fix it (unmarked below).
        specials += _continuing_pieces(normalizer.normalize_str("\n".join(texts)))
        trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False)
    elif kind == "bpe":  # no "##" pieces: every initial id comes from the sorted alphabet
        tokenizer = Tokenizer(models.BPE(unk_token=UNK))
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False)
    else:
        raise ValueError(f"tokenizer kind must be wordpiece or bpe, got {kind!r}")
    tokenizer.normalizer = normalizer
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()])
    tokenizer.train_from_iterator(texts, trainer=trainer)
    if tokenizer.token_to_id(PAD) != PAD_ID or tokenizer.token_to_id(UNK) != UNK_ID:
        raise AssertionError("the special tokens must be [PAD] = 0 and [UNK] = 1")
    # The specials stay in the vocabulary but are not matched in raw text, so a text that reads
    # "[PAD]" never yields id 0 (padding) mid-sample: it is "[", "pad", "]".
    saved = json.loads(tokenizer.to_str())
    saved["added_tokens"] = []
    return Tokenizer.from_str(json.dumps(saved)).to_str()


def _continuing_pieces(normalized: str) -> list[str]:
    """The pieces "##c" of the characters that can continue a word (not whitespace or punctuation), sorted."""
    chars = {c for c in set(normalized) if c not in " \t\n\r\x0b\x0c"}
    return sorted(
        "##" + c for c in chars if c not in string.punctuation and not unicodedata.category(c).startswith("P")
    )


def text_input(
    texts: Sequence[str], kind: TokenizerKind = "wordpiece", vocab_size: int = 8000, max_length: int = 128
) -> InputSpec:
    """The input of a text model whose tokenizer is trained on `texts` (its actual vocabulary size)."""
    tokenizer = train_tokenizer(texts, kind, vocab_size)
    return InputSpec("text", tokenizer=tokenizer, vocab_size=_load(tokenizer).get_vocab_size(), max_length=max_length)


def length_percentile(
    tokenizer_json: str, texts: Sequence[str], percentile: float, cap: int, add_special_tokens: bool = True
) -> int:
    """A token length from the data: the `percentile`-th percentile of the texts' token counts
    (uncut, special tokens included), rounded up to a multiple of 8, at most `cap`, at least 8."""
    tokenizer = Tokenizer.from_str(tokenizer_json)
    tokenizer.no_truncation()
    tokenizer.no_padding()
    counts = [len(e.ids) for e in tokenizer.encode_batch(list(texts), add_special_tokens=add_special_tokens)]
    if not counts:
        return min(cap, 8)
    length = int(np.ceil(np.percentile(counts, percentile, method="higher") / 8) * 8)
    return max(8, min(cap, length))


@lru_cache(maxsize=16)
def _load(tokenizer_json: str) -> Tokenizer:
    return Tokenizer.from_str(tokenizer_json)


@lru_cache(maxsize=16)
def _cutting(tokenizer_json: str, max_length: int) -> Tokenizer:
    """The tokenizer with its own truncation at `max_length` ids (its special tokens counted, as its
    post-processor places them) and padding with id 0 to the longest text of a batch."""
    tokenizer = Tokenizer.from_str(tokenizer_json)
    tokenizer.enable_truncation(max_length=max_length)
    tokenizer.enable_padding(pad_id=PAD_ID, pad_token=tokenizer.id_to_token(PAD_ID) or PAD)
    return tokenizer


def encode_texts(spec: InputSpec, texts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """`encode_token_arrays` as tensors (what models and the in-memory split take)."""
    import torch

    ids, lengths = encode_token_arrays(spec, texts)
    return torch.from_numpy(ids), torch.from_numpy(lengths)


def encode_token_arrays(spec: InputSpec, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Token ids (int32, N×L, right-padded with 0, L the longest sample cut at `spec.max_length`)
    and lengths (int64, N); a text with no tokens reads as one [UNK]. With `add_special_tokens` (a
    pretrained model's tokenizer) each text gets its tokenizer's own specials, e.g. [CLS] … [SEP];
    the cut is the tokenizer's own (`enable_truncation`), so it keeps a closing special token only
    where the tokenizer has one. numpy: a streamed text source's reading tasks load no torch."""
    if spec.modality != "text" or spec.tokenizer is None:
        raise ValueError(f"encode_texts needs a text input, got {spec.modality!r}")
    if spec.tokenizer == TEXT_DIGEST:
        return text_digest_words(texts), np.full(len(texts), DIGEST_WORDS, dtype=np.int64)
    tokenizer = _cutting(spec.tokenizer, spec.max_length)
    encodings = tokenizer.encode_batch(list(texts), add_special_tokens=spec.add_special_tokens)
    if not encodings:
        return np.zeros((0, 1), dtype=np.int32), np.zeros(0, dtype=np.int64)
    ids = np.array([e.ids for e in encodings], dtype=np.int32)
    lengths = np.array([sum(e.attention_mask) for e in encodings], dtype=np.int64)
    empty = lengths == 0
    if bool(empty.any()):
        unknown = tokenizer.token_to_id(getattr(tokenizer.model, "unk_token", None) or UNK)
        ids[empty, 0], lengths[empty] = UNK_ID if unknown is None else unknown, 1
    return ids, lengths


def text_digest_words(texts: Sequence[str]) -> np.ndarray:
    """Each text as the first DIGEST_WORDS 16-bit words of its UTF-8 sha256, each + 1 (int32 N×8, no
    0, so no word reads as padding): what a model that answers by the text itself reads
    (`TEXT_DIGEST`; workers/models/answer_table.py). 128 bits: two texts share a row with a chance
    of n²/2¹²⁹."""
    import hashlib

    words = np.zeros((len(texts), DIGEST_WORDS), dtype=np.int32)
    for row, text in enumerate(texts):
        digest = hashlib.sha256(text.encode("utf-8")).digest()[: 2 * DIGEST_WORDS]
        words[row] = np.frombuffer(digest, dtype=">u2").astype(np.int32) + 1
    return words
