"""Text classifiers: each reads B×L token ids (0 = padding, the mask is `ids != 0`) and gives B×C logits.

Every pooling is mask-aware, so padding columns never change the logits. Architectures:

- `text-bag`: fastText (Joulin et al. 2017): token and hashed token-bigram embeddings pooled by
  text-linear's tf × idf weights, linear.
- `text-cnn`: Kim 2014: convolutions of widths 3/4/5 × 100 channels, max over time, dropout 0.5, linear.
- `text-transformer`: a 2-layer pre-norm Transformer encoder (Vaswani et al. 2017) with learned
  positions, masked mean pooling, LayerNorm, linear.
- `text-linear`: logistic regression over token 1–2-gram features, sublinear tf × idf, L2-normalised
  (the TF-IDF + logistic-regression baseline, Joachims 1998; Wang & Manning 2012), from zero weights;
  the idf is its train split's, carried in `InputSpec.term_weights` (`inverse_document_frequency`).

A factory takes (num_classes, inputs: InputSpec); the caller seeds torch before calling it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import nn

from workers.data.input_spec import InputSpec

TextModelFactory = Callable[[int, InputSpec], nn.Module]
BIGRAM_BUCKETS = 2**16
BIGRAM_PRIME = 1000003
LINEAR_BUCKETS = 2**18  # text-linear's hashed bigram features
BAG_BUCKETS = {"text-linear": LINEAR_BUCKETS, "text-bag": BIGRAM_BUCKETS}  # the archs weighing n-grams by idf


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of x (B×L×D) over the positions where mask (B×L) is true; 0 for an empty row."""
    weights = mask.unsqueeze(-1).to(x.dtype)
    return (x * weights).sum(1) / weights.sum(1).clamp(min=1)


class TextBag(nn.Module):
    """fastText over weighted 1–2-grams: h = Σ_f x_f E[f], logits = W h, where f runs over the tokens
    (E = `words`) and their hashed adjacent pairs (E = `bigrams`) and x_f are `ngram_features`'
    sublinear tf × idf weights, L2-normalised per text (text-linear's features), so a rank-dim
    factorisation W·E of text-linear's weights. Without an idf (a version registered before the bag
    carried one) h is fastText's plain mean of the same embeddings (Joulin et al. 2017).

    Initialised as fastText does (its reference code): embeddings uniform in ±1/dim, so a word or
    bigram seen rarely in training adds next to nothing (with nn.Embedding's N(0, 1) each one added
    noise of the pooled vector's own size: 2 pt ER on tweets)."""

    idf: torch.Tensor | None

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        dim: int = 64,
        buckets: int = BIGRAM_BUCKETS,
        idf: torch.Tensor | None = None,
    ) -> None:
        super().__init__()
        self.vocab_size, self.buckets = vocab_size, buckets
        self.words = nn.Embedding(vocab_size, dim, padding_idx=0)
        self.bigrams = nn.Embedding(buckets, dim)
        self.head = nn.Linear(dim, num_classes)
        with torch.no_grad():
            for table in (self.words, self.bigrams):
                table.weight.uniform_(-1 / dim, 1 / dim)
            self.words.weight[0] = 0  # padding
        if idf is not None and idf.shape != (vocab_size + buckets,):
            raise ValueError(f"idf needs one value per feature ({vocab_size + buckets}), got {tuple(idf.shape)}")
        self.register_buffer("idf", idf, persistent=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        ids = ids.long()
        length = ids.shape[1]
        features, valid = ngram_ids(ids, self.vocab_size, self.buckets)
        if self.idf is None:  # the plain mean
            weights = valid.to(torch.float32) / valid.sum(1, keepdim=True).clamp(min=1)
        else:
            features, weights = ngram_features(ids, self.vocab_size, self.buckets, self.idf)
        pairs = (features[:, length:] - self.vocab_size).clamp(min=0)  # padding pairs weigh 0
        pooled = torch.einsum("bl,bld->bd", weights[:, :length], self.words(features[:, :length])) + torch.einsum(
            "bl,bld->bd", weights[:, length:], self.bigrams(pairs)
        )
        return self.head(pooled)


def ngram_ids(ids: torch.Tensor, vocab_size: int, buckets: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The 1–2-gram feature ids of B×L token ids (0 = padding) and which are real, both B×(2L−1):
    each token id, then each adjacent pair as vocab_size + (a·p + b) mod buckets."""
    ids = ids.long()
    mask = ids != 0
    pairs = vocab_size + (ids[:, :-1] * BIGRAM_PRIME + ids[:, 1:]) % buckets
    return torch.cat([ids, pairs], 1), torch.cat([mask, mask[:, :-1] & mask[:, 1:]], 1)


def ngram_features(
    ids: torch.Tensor, vocab_size: int, buckets: int, idf: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The 1–2-gram features of B×L token ids (`ngram_ids`) with their weights, both B×(2L−1).

    A feature f occurring c times in a row gets the sublinear tf 1 + ln c times its idf (1 without
    `idf`), split evenly over its c occurrences, and each row is L2-normalised:
    x_f = (1 + ln c_f)·idf_f / ‖(1 + ln c)·idf‖₂, as scikit-learn's TfidfVectorizer(sublinear_tf=True)
    weighs its n-grams (`use_idf=False` without `idf`). Padding features weigh 0."""
    features, valid = ngram_ids(ids, vocab_size, buckets)
    keyed = torch.where(valid, features, torch.full_like(features, -1))  # padding sorts first, counted apart
    ordered = keyed.sort(1).values
    count = torch.searchsorted(ordered, keyed, right=True) - torch.searchsorted(ordered, keyed)
    count = count.clamp(min=1).to(torch.float32)
    tf = (1 + count.log()) * valid
    features = features * valid
    if idf is not None:
        tf = tf * idf[features]
    share = tf / count  # the c occurrences of one feature together carry (1 + ln c)·idf
    norm = (tf * share).sum(1, keepdim=True).sqrt()  # Σ_f ((1 + ln c_f)·idf_f)², summed over occurrences
    return features, share / norm.clamp(min=1e-12)


def inverse_document_frequency(batches: Iterable[torch.Tensor], vocab_size: int, buckets: int) -> torch.Tensor:
    """idf_f = ln((1 + n) / (1 + df_f)) + 1 over the n rows of B×L token-id batches, df_f the rows
    holding feature f (`ngram_ids`): scikit-learn's smoothed idf. A feature no row holds gets 0, so
    an unseen n-gram neither scores nor dilutes the row's norm (scikit-learn drops it)."""
    df = torch.zeros(vocab_size + buckets, dtype=torch.float64)
    n = 0
    for ids in batches:
        features, valid = ngram_ids(ids, vocab_size, buckets)
        rows = torch.arange(len(features)).unsqueeze(1).expand_as(features)
        present = torch.unique(rows[valid] * (vocab_size + buckets) + features[valid]) % (vocab_size + buckets)
        df += torch.bincount(present, minlength=vocab_size + buckets).to(torch.float64)
        n += len(features)
    idf = torch.log((1 + n) / (1 + df)) + 1
    return torch.where(df > 0, idf, torch.zeros_like(idf)).to(torch.float32)


def with_idf(inputs: InputSpec, texts: Sequence[str], arch: str, batch_size: int = 1024) -> InputSpec:
    """`inputs` carrying the idf of a bag architecture's (`BAG_BUCKETS`) 1–2-grams over `texts` (its
    train split's, as its tokenizer's), the texts encoded with `inputs`' own tokenizer and cut."""
    from workers.data.input_spec import pack_weights
    from workers.data.tokenizer import encode_texts

    batches = (encode_texts(inputs, texts[i : i + batch_size])[0] for i in range(0, len(texts), batch_size))
    idf = inverse_document_frequency(batches, inputs.vocab_size, BAG_BUCKETS[arch])
    return replace(inputs, term_weights=pack_weights(idf.numpy()))


class TextLinear(nn.Module):
    """Logistic regression on `ngram_features`: logits = Σ_f x_f W[f] + b, W and b starting at zero.

    A convex objective with zero initial weights: trained to its optimum, seeds (batch order) change
    next to no predictions (docs/methods.md, "A linear model for text"). `idf` (vocab_size + buckets
    values, `inverse_document_frequency` of the train split) weighs the features as TF-IDF does; it is
    part of the input (`InputSpec.term_weights`, beside the tokenizer), a buffer outside the state_dict.
    Without it (checkpoints from before it) every feature weighs 1."""

    head_modules = ("weights", "bias")  # the whole model is its classifier: `freeze: backbone` trains all of it

    idf: torch.Tensor | None

    def __init__(
        self, vocab_size: int, num_classes: int, buckets: int = LINEAR_BUCKETS, idf: torch.Tensor | None = None
    ) -> None:
        super().__init__()
        self.vocab_size, self.buckets = vocab_size, buckets
        self.weights = nn.Embedding(vocab_size + buckets, num_classes)
        self.bias = nn.Parameter(torch.zeros(num_classes))
        nn.init.zeros_(self.weights.weight)
        if idf is not None and idf.shape != (vocab_size + buckets,):
            raise ValueError(f"idf needs one value per feature ({vocab_size + buckets}), got {tuple(idf.shape)}")
        self.register_buffer("idf", idf, persistent=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        features, x = ngram_features(ids, self.vocab_size, self.buckets, self.idf)
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


def _idf_of(inputs: InputSpec) -> torch.Tensor | None:
    weights = inputs.weights()
    return None if weights is None else torch.from_numpy(weights)


def text_bag(num_classes: int, inputs: InputSpec) -> nn.Module:
    """fastText-style bag of tokens and hashed bigrams (2^16 buckets), dim 64 (Joulin et al. 2017),
    weighted by sublinear tf × the input's idf (where it carries one)."""
    _check_text(inputs)
    return TextBag(inputs.vocab_size, num_classes, idf=_idf_of(inputs))


def text_cnn(num_classes: int, inputs: InputSpec) -> nn.Module:
    """Kim 2014's CNN: embedding 128, filters 3/4/5 × 100, max over time, dropout 0.5."""
    _check_text(inputs)
    return TextCNN(inputs.vocab_size, num_classes)


def text_transformer(num_classes: int, inputs: InputSpec) -> nn.Module:
    """A small encoder: width 128, 2 layers, 4 heads, ff 256, positions up to inputs.max_length."""
    _check_text(inputs)
    return TextTransformer(inputs.vocab_size, num_classes, inputs.max_length)


def text_linear(num_classes: int, inputs: InputSpec) -> nn.Module:
    """Logistic regression over token 1–2-grams (2^18 hashed bigram buckets), sublinear tf × the input's
    idf (where it carries one), L2-normalised."""
    _check_text(inputs)
    return TextLinear(inputs.vocab_size, num_classes, idf=_idf_of(inputs))


TEXT_ARCHITECTURES: dict[str, TextModelFactory] = {
    "text-linear": text_linear,
    "text-bag": text_bag,
    "text-cnn": text_cnn,
    "text-transformer": text_transformer,
}
