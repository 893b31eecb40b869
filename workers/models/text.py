"""Text classifiers: each reads B×L token ids (0 = padding, the mask is `ids != 0`) and gives B×C logits.

Every pooling is mask-aware, so padding columns never change the logits. Architectures:

- `text-bag`: fastText (Joulin et al. 2017): the mean of token and hashed token-bigram embeddings, linear.
- `text-cnn`: Kim 2014: convolutions of widths 3/4/5 × 100 channels, max over time, dropout 0.5, linear.
- `text-transformer`: a 2-layer pre-norm Transformer encoder (Vaswani et al. 2017) with learned
  positions, masked mean pooling, LayerNorm, linear.

A factory takes (num_classes, inputs: InputSpec); the caller seeds torch before calling it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from workers.data.input_spec import InputSpec

TextModelFactory = Callable[[int, InputSpec], nn.Module]
BIGRAM_BUCKETS = 2**16
BIGRAM_PRIME = 1000003


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of x (B×L×D) over the positions where mask (B×L) is true; 0 for an empty row."""
    weights = mask.unsqueeze(-1).to(x.dtype)
    return (x * weights).sum(1) / weights.sum(1).clamp(min=1)


class TextBag(nn.Module):
    """fastText: h = mean(E[w_i] for tokens, B[(w_i·p + w_{i+1}) mod buckets] for adjacent pairs), logits = W h.

    Initialised as fastText does (Joulin et al. 2017, its reference code): embeddings uniform in
    ±1/dim, so a word or bigram seen rarely in training adds next to nothing to the mean (with
    nn.Embedding's N(0, 1) each one added noise of the mean's own size: 2 pt ER on tweets)."""

    def __init__(self, vocab_size: int, num_classes: int, dim: int = 64, buckets: int = BIGRAM_BUCKETS) -> None:
        super().__init__()
        self.buckets = buckets
        self.words = nn.Embedding(vocab_size, dim, padding_idx=0)
        self.bigrams = nn.Embedding(buckets, dim)
        self.head = nn.Linear(dim, num_classes)
        with torch.no_grad():
            for table in (self.words, self.bigrams):
                table.weight.uniform_(-1 / dim, 1 / dim)
            self.words.weight[0] = 0  # padding

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        ids = ids.long()
        mask = ids != 0
        pair_mask = mask[:, :-1] & mask[:, 1:]
        pairs = (ids[:, :-1] * BIGRAM_PRIME + ids[:, 1:]) % self.buckets
        total = (self.words(ids) * mask.unsqueeze(-1)).sum(1) + (self.bigrams(pairs) * pair_mask.unsqueeze(-1)).sum(1)
        count = mask.sum(1, keepdim=True) + pair_mask.sum(1, keepdim=True)
        return self.head(total / count.clamp(min=1))


class TextCNN(nn.Module):
    """Kim 2014: c_j = ReLU(w · e_{j:j+h} + b) for h ∈ widths, max over windows starting at a token.

    Ids are right-padded with max(widths) − 1 zeros (zero embeddings), so every token starts a window
    and a sequence shorter than a filter still has one; windows starting at padding are ignored."""

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        dim: int = 128,
        widths: tuple[int, ...] = (3, 4, 5),
        channels: int = 100,
        dropout: float = 0.5,
    ) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, dim, padding_idx=0)
        self.convs = nn.ModuleList(nn.Conv1d(dim, channels, w) for w in widths)
        self.pad = max(widths) - 1
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(channels * len(widths), num_classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        ids = F.pad(ids.long(), (0, self.pad))
        mask = ids != 0
        x = (self.embedding(ids) * mask.unsqueeze(-1)).transpose(1, 2)  # B×D×(L+pad)
        pooled = []
        for conv in self.convs:
            c = torch.relu(conv(x))  # B×channels×(L+pad−w+1): window j starts at token j
            starts = mask[:, : c.shape[-1]].unsqueeze(1)
            pooled.append(c.masked_fill(~starts, float("-inf")).amax(-1))
        h = torch.cat(pooled, 1)
        h = torch.where(torch.isinf(h), torch.zeros_like(h), h)  # an all-padding row: 0, not −inf
        return self.head(self.dropout(h))


class TextTransformer(nn.Module):
    """Embeddings + learned positions → 2 pre-norm encoder layers (padding keys masked) → masked mean
    → LayerNorm → linear. Ids beyond `max_length` columns are cut, as the tokenizer cuts them."""

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        max_length: int,
        dim: int = 128,
        layers: int = 2,
        heads: int = 4,
        ff: int = 256,
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        self.max_length = max_length
        self.embedding = nn.Embedding(vocab_size, dim, padding_idx=0)
        self.positions = nn.Embedding(max_length, dim)
        layer = nn.TransformerEncoderLayer(dim, heads, ff, dropout, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        ids = ids[:, : self.max_length].long()
        mask = ids != 0
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.embedding(ids) + self.positions(positions)
        x = self.encoder(x, src_key_padding_mask=~mask)
        return self.head(self.norm(_masked_mean(x, mask)))


def _check_text(inputs: InputSpec) -> None:
    if inputs.modality != "text":
        raise ValueError(f"a text model needs a text input, got {inputs.modality!r}")


def text_bag(num_classes: int, inputs: InputSpec) -> nn.Module:
    """fastText-style bag of tokens and hashed bigrams, dim 64 (Joulin et al. 2017)."""
    _check_text(inputs)
    return TextBag(inputs.vocab_size, num_classes)


def text_cnn(num_classes: int, inputs: InputSpec) -> nn.Module:
    """Kim 2014's CNN: embedding 128, filters 3/4/5 × 100, max over time, dropout 0.5."""
    _check_text(inputs)
    return TextCNN(inputs.vocab_size, num_classes)


def text_transformer(num_classes: int, inputs: InputSpec) -> nn.Module:
    """A small encoder: width 128, 2 layers, 4 heads, ff 256, positions up to inputs.max_length."""
    _check_text(inputs)
    return TextTransformer(inputs.vocab_size, num_classes, inputs.max_length)


TEXT_ARCHITECTURES: dict[str, TextModelFactory] = {
    "text-bag": text_bag,
    "text-cnn": text_cnn,
    "text-transformer": text_transformer,
}
