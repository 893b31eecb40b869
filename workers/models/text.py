"""Text classifiers: each reads B×L token ids (0 = padding, the mask is `ids != 0`) and gives B×C logits.

Every pooling is mask-aware, so padding columns never change the logits. Architectures:

- `text-bag`: fastText (Joulin et al. 2017): the mean of token and hashed token-bigram embeddings, linear.
- `text-cnn`: Kim 2014: convolutions of widths 3/4/5 × 100 channels, max over time, dropout 0.5, linear.
- `text-transformer`: a 2-layer pre-norm Transformer encoder (Vaswani et al. 2017) with learned
  positions, masked mean pooling, LayerNorm, linear.
- `text-linear`: logistic regression over token 1–2-gram features, sublinear tf, L2-normalised (the
  TF-IDF + logistic-regression baseline, Joachims 1998; Wang & Manning 2012), from zero weights.

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


def ngram_features(ids: torch.Tensor, vocab_size: int, buckets: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The 1–2-gram features of B×L token ids (0 = padding) with their weights, both B×(2L−1).

    Features: each token id f, and each adjacent pair as vocab_size + (a·p + b) mod buckets. A feature
    occurring c times in a row gets the sublinear tf 1 + ln c (split evenly over its c occurrences),
    and each row is L2-normalised: x_f = (1 + ln c_f) / ‖(1 + ln c)‖₂, as scikit-learn's
    TfidfVectorizer(sublinear_tf=True, use_idf=False) weighs its n-grams. Padding features weigh 0."""
    ids = ids.long()
    mask = ids != 0
    pairs = vocab_size + (ids[:, :-1] * BIGRAM_PRIME + ids[:, 1:]) % buckets
    features = torch.cat([ids, pairs], 1)
    valid = torch.cat([mask, mask[:, :-1] & mask[:, 1:]], 1)
    keyed = torch.where(valid, features, torch.full_like(features, -1))  # padding sorts first, counted apart
    ordered = keyed.sort(1).values
    count = torch.searchsorted(ordered, keyed, right=True) - torch.searchsorted(ordered, keyed)
    count = count.clamp(min=1).to(torch.float32)
    tf = (1 + count.log()) * valid
    share = tf / count  # the c occurrences of one feature together carry 1 + ln c
    norm = (tf * share).sum(1, keepdim=True).sqrt()  # Σ_f (1 + ln c_f)², summed over occurrences
    return features * valid, share / norm.clamp(min=1e-12)


class TextLinear(nn.Module):
    """Logistic regression on `ngram_features`: logits = Σ_f x_f W[f] + b, W and b starting at zero.

    A convex objective with zero initial weights: trained to its optimum, seeds (batch order) change
    next to no predictions (docs/methods.md, "A linear model for text"). IDF weighting is left out:
    it would be a statistic fitted outside the training, and without it the model is within 0.5 pt of
    the TF-IDF baseline's ER and NFR on tweets (docs/benchmarks.md, "Baselines")."""

    head_modules = ("weights", "bias")  # the whole model is its classifier: `freeze: backbone` trains all of it

    def __init__(self, vocab_size: int, num_classes: int, buckets: int = 2**18) -> None:
        super().__init__()
        self.vocab_size, self.buckets = vocab_size, buckets
        self.weights = nn.Embedding(vocab_size + buckets, num_classes)
        self.bias = nn.Parameter(torch.zeros(num_classes))
        nn.init.zeros_(self.weights.weight)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        features, x = ngram_features(ids, self.vocab_size, self.buckets)
        return (self.weights(features) * x.unsqueeze(-1).to(self.weights.weight.dtype)).sum(1) + self.bias


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


def text_linear(num_classes: int, inputs: InputSpec) -> nn.Module:
    """Logistic regression over token 1–2-grams (2^18 hashed bigram buckets), sublinear tf, L2-normalised."""
    _check_text(inputs)
    return TextLinear(inputs.vocab_size, num_classes)


TEXT_ARCHITECTURES: dict[str, TextModelFactory] = {
    "text-linear": text_linear,
    "text-bag": text_bag,
    "text-cnn": text_cnn,
    "text-transformer": text_transformer,
}
