"""Text tokenizers and text classifiers, on short hand-written English sentences of three topics."""

import json
import math

import pytest
import torch

from pipelines.defaults import recipe_for
from workers.data.input_spec import InputSpec
from workers.data.tokenizer import encode_texts, text_input, train_tokenizer
from workers.models.text import BIGRAM_PRIME, TEXT_ARCHITECTURES, TextBag, TextLinear, ngram_features

SPORT = [
    "The striker scored a brilliant goal in the final minute.",
    "Our team won the football match after extra time.",
    "The goalkeeper saved a penalty and the fans cheered.",
    "She ran the marathon in under three hours.",
    "The coach picked a young player for the cup final.",
    "Tennis players trained on the clay court all morning.",
    "The referee showed a red card to the defender.",
    "He hit a home run in the ninth inning.",
    "The basketball team lost by two points last night.",
    "Cyclists raced up the mountain stage of the tour.",
    "The league title was decided on the last match day.",
    "Swimmers broke the relay world record at the games.",
    "The captain lifted the trophy in front of the crowd.",
    "A late goal sent the home supporters wild.",
]
WEATHER = [
    "Heavy rain is expected across the north tomorrow.",
    "A cold wind will blow from the east this weekend.",
    "Thunderstorms may bring hail and flooding tonight.",
    "The forecast says sunny skies and warm temperatures.",
    "Snow fell overnight and the roads are icy.",
    "Fog will clear by noon, leaving a bright afternoon.",
    "Temperatures will drop below freezing after dark.",
    "A storm warning was issued for the coast.",
    "Light showers will turn to drizzle in the evening.",
    "The heatwave continues with humid nights ahead.",
    "Strong gusts knocked down trees during the gale.",
    "Clouds will build and rain arrives by Friday.",
    "Frost is likely in rural valleys before sunrise.",
    "The wet and windy spell should end next week.",
]
COOKING = [
    "Chop the onions and fry them in olive oil.",
    "Bake the bread for forty minutes until golden.",
    "Whisk the eggs with sugar and melted butter.",
    "Simmer the tomato sauce with garlic and basil.",
    "Season the soup with salt, pepper and fresh herbs.",
    "Knead the dough and let it rise for an hour.",
    "Roast the chicken with lemon and rosemary.",
    "Stir the risotto slowly while adding warm stock.",
    "Grate the cheese over the pasta before serving.",
    "Marinate the beef overnight in soy sauce and ginger.",
    "Boil the potatoes, then mash them with cream.",
    "Slice the apples thinly for the tart filling.",
    "Toast the spices in a dry pan to release flavour.",
    "Fold the flour gently into the beaten egg whites.",
]
TEXTS = SPORT + WEATHER + COOKING
LABELS = torch.tensor([0] * len(SPORT) + [1] * len(WEATHER) + [2] * len(COOKING))
LEARNING_RATES = {"text-linear": 0.1, "text-bag": 1e-2, "text-cnn": 1e-2, "text-transformer": 3e-3}


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny batches: one thread is faster than several fighting over shared cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def spec() -> InputSpec:
    return text_input(TEXTS, "wordpiece", vocab_size=400, max_length=32)


def build(arch: str, spec: InputSpec, seed: int = 0, random_linear: bool = False) -> torch.nn.Module:
    """`arch` for 3 classes; `random_linear`: text-linear with random weights in place of its zeros
    (zero weights give zero logits, which no padding can change)."""
    torch.manual_seed(seed)
    model = TEXT_ARCHITECTURES[arch](3, spec)
    if random_linear and isinstance(model, TextLinear):
        with torch.no_grad():
            model.weights.weight.normal_()
    return model


@pytest.mark.parametrize("kind", ["wordpiece", "bpe"])
def test_tokenizer_is_deterministic_with_pad_0_and_unk_1(kind):
    # WordPiece training numbers its "##" pieces in hash-map order unless fixed (tokenizers#1794).
    first = train_tokenizer(TEXTS, kind, 300)
    assert all(train_tokenizer(TEXTS, kind, 300) == first for _ in range(3))
    assert train_tokenizer(TEXTS[:20], kind, 300) != first
    tokenizer = json.loads(first)
    assert list(tokenizer["model"]["vocab"].items())[:2] == [("[PAD]", 0), ("[UNK]", 1)]
    assert tokenizer["added_tokens"] == []  # a text that reads "[PAD]" is not padding
    assert len(tokenizer["model"]["vocab"]) <= 300


def test_encoding_pads_with_zero_and_counts_lengths(spec):
    assert spec.modality == "text" and 50 < spec.vocab_size <= 400
    texts = ["Rain!", "The striker scored a brilliant goal in the final minute.", "", "Café CRÈME brûlée", "[PAD]"]
    ids, lengths = encode_texts(spec, texts)
    assert ids.dtype == torch.int32 and lengths.dtype == torch.int64
    assert ids.shape == (5, int(lengths.max())) and ids.shape[1] > 10
    for row, n in zip(ids, lengths):
        assert (row[:n] != 0).all() and (row[n:] == 0).all()
        assert (row < spec.vocab_size).all() and (row >= 0).all()
    assert lengths[0] == 2  # "rain", "!"
    assert ids[2].tolist()[:1] == [1] and lengths[2] == 1  # no tokens: one [UNK]
    assert 1 not in ids[3].tolist()  # lowercased, accents stripped: made of known pieces
    assert lengths[4] >= 3  # "[", "pad" (in pieces), "]": no special token is read from raw text


def test_max_length_cuts_each_sample(spec):
    short = InputSpec("text", tokenizer=spec.tokenizer, vocab_size=spec.vocab_size, max_length=4)
    full, full_lengths = encode_texts(spec, TEXTS[:3])
    cut, cut_lengths = encode_texts(short, TEXTS[:3])
    assert cut.shape == (3, 4) and cut_lengths.tolist() == [4, 4, 4]
    assert torch.equal(cut, full[:, :4]) and (full_lengths > 4).all()


@pytest.mark.parametrize("template,closing", [("[CLS] $A [SEP]", True), ("[CLS] $A", False)])
def test_a_pretrained_tokenizer_cuts_as_its_own_truncation_does(template, closing):
    """With its special tokens (hf:DIR), a text is cut by the tokenizer's own truncation: [CLS] and
    the first words, then [SEP] only for a tokenizer that closes with one — never the text's last word."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
    tokenizer.train_from_iterator(TEXTS, trainers.WordPieceTrainer(vocab_size=300, special_tokens=specials))
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single=template, special_tokens=[("[CLS]", cls), ("[SEP]", sep)][: 2 if closing else 1]
    )
    spec = InputSpec("text", tokenizer=tokenizer.to_str(), vocab_size=300, max_length=5, add_special_tokens=True)
    words = "the striker scored a brilliant goal in the final minute"
    ids, lengths = encode_texts(spec, [words, "goal"])
    first_words = tokenizer.encode(words, add_special_tokens=False).ids
    expected = [cls, *first_words[:3], sep] if closing else [cls, *first_words[:4]]
    assert ids[0].tolist() == expected and lengths.tolist() == [5, 3 if closing else 2]


@pytest.mark.parametrize("arch", sorted(TEXT_ARCHITECTURES))
def test_logits_are_finite_and_ignore_padding(arch, spec):
    model = build(arch, spec, random_linear=True).eval()
    ids, lengths = encode_texts(spec, ["Rain", "Snow.", *TEXTS[:6]])  # rows shorter than any filter
    padded = torch.cat([ids, torch.zeros(len(ids), 7, dtype=ids.dtype)], 1)
    with torch.no_grad():
        logits = model(ids)
        assert logits.shape == (8, 3) and torch.isfinite(logits).all()
        assert torch.allclose(model(padded), logits, atol=1e-5)
        assert torch.allclose(model(ids[1:2, : lengths[1]]), logits[1:2], atol=1e-5)  # alone: no padding at all
        assert torch.allclose(model(ids.long()), logits, atol=1e-5)


def train_accuracy(arch: str, spec: InputSpec, steps: int = 60) -> float:
    model = build(arch, spec)
    ids, _ = encode_texts(spec, TEXTS)
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATES[arch], fused=True)  # fused: 4× faster on CPU
    model.train()
    for _ in range(steps):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(ids), LABELS).backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        return (model(ids).argmax(1) == LABELS).float().mean().item()


@pytest.mark.parametrize("arch", sorted(TEXT_ARCHITECTURES))
def test_each_architecture_learns_the_topics(arch, spec):
    assert train_accuracy(arch, spec) >= 0.9


def test_a_bpe_tokenizer_works_too():
    spec = text_input(TEXTS, "bpe", vocab_size=300, max_length=16)
    ids, lengths = encode_texts(spec, TEXTS)
    assert ids.shape[1] <= 16 and (ids < spec.vocab_size).all() and (lengths >= 1).all()
    assert train_accuracy("text-bag", spec) >= 0.9


def test_a_text_model_refuses_an_image_input():
    with pytest.raises(ValueError, match="text input"):
        TEXT_ARCHITECTURES["text-cnn"](3, InputSpec.image())


def test_ngram_features_weigh_sublinear_tf_normalised_by_hand():
    """ids [5, 6, 5, pad], vocab 10, 7 buckets: unigrams 5 (twice), 6; bigrams (5, 6) → 10 + (5p + 6) mod 7
    and (6, 5) → 10 + (6p + 5) mod 7 with p = 1000003 ≡ 4 (mod 7), i.e. 10 + 26 mod 7 = 15 and
    10 + 29 mod 7 = 11. tf: 1 + ln 2 for 5, 1 for the rest; ‖x‖₂ = √((1 + ln 2)² + 3); the two
    occurrences of 5 carry half of its weight each; padding and the pair that reaches it weigh 0."""
    assert BIGRAM_PRIME % 7 == 4
    features, weights = ngram_features(torch.tensor([[5, 6, 5, 0]]), vocab_size=10, buckets=7)
    norm = math.sqrt((1 + math.log(2)) ** 2 + 3)
    half = (1 + math.log(2)) / 2 / norm
    assert features.tolist() == [[5, 6, 5, 0, 15, 11, 0]]
    assert torch.allclose(weights, torch.tensor([[half, 1 / norm, half, 0, 1 / norm, 1 / norm, 0]]))


def _bag_by_hand(weights: list[float], idf: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """A TextBag (vocab 10, 7 buckets, dim 3) on ids [5, 6, 5, pad]: its logits, and W·Σ_f x_f E[f] + b
    computed by hand from the rows the features pick (words 5, 6, 5; bigram buckets 15 − 10 = 5 and
    11 − 10 = 1, as in the hand-made features above) and the given weight of each."""
    torch.manual_seed(0)
    bag = TextBag(vocab_size=10, num_classes=2, dim=3, buckets=7, idf=idf)
    rows = [bag.words.weight[5], bag.words.weight[6], bag.words.weight[5], bag.bigrams.weight[5], bag.bigrams.weight[1]]
    pooled = sum(w * row for w, row in zip(weights, rows, strict=True))
    with torch.no_grad():
        return bag(torch.tensor([[5, 6, 5, 0]]))[0], bag.head(pooled)


def test_text_bag_pools_its_embeddings_by_the_tf_idf_weights():
    """With an idf, h = Σ_f x_f E[f] with x_f `ngram_features`' weights: idf 2 on word 6 and 1
    elsewhere gives tf (1 + ln 2, 2, 1, 1) over (5, 6, (5,6), (6,5)), normalised, word 5's split
    over its two occurrences."""
    idf = torch.ones(17)
    idf[6] = 2.0
    norm = math.sqrt((1 + math.log(2)) ** 2 + 4 + 1 + 1)
    half = (1 + math.log(2)) / 2 / norm
    logits, expected = _bag_by_hand([half, 2 / norm, half, 1 / norm, 1 / norm], idf)
    assert torch.allclose(logits, expected, atol=1e-6)


def test_text_bag_without_an_idf_is_fasttexts_mean():
    """A version registered before the bag carried an idf reloads as it was: the plain mean of the
    3 token and 2 bigram embeddings."""
    logits, expected = _bag_by_hand([1 / 5] * 5, None)
    assert torch.allclose(logits, expected, atol=1e-6)


def test_text_linear_is_logistic_regression_on_those_features():
    """logits = Σ_f x_f W[f] + b, with W[f] the row of feature f; zero weights at the start."""
    model = TextLinear(vocab_size=10, num_classes=2, buckets=7)
    assert all(not p.detach().any() for p in model.parameters())
    with torch.no_grad():
        model.weights.weight.copy_(torch.arange(34, dtype=torch.float32).reshape(17, 2))
        model.bias.copy_(torch.tensor([0.5, -0.5]))
        ids = torch.tensor([[5, 6, 5, 0]])
        features, x = ngram_features(ids, 10, 7)
        expected = (x.T * model.weights.weight[features[0]]).sum(0) + model.bias
        assert torch.allclose(model(ids)[0], expected)


def test_text_linear_trained_with_its_defaults_gives_the_same_predictions_whatever_the_seed():
    """A convex objective from zero weights, run to its optimum (pipelines/defaults.py's recipe: lr
    decayed to 0 over 30 epochs): two seeds (two batch orders) disagree on at most 1 % of held-out
    tweets, fewer than two text-bags of different seeds do (a non-convex model)."""
    from workers.models.checkpoints import ModelSettings
    from workers.tasks.records import DataRequest
    from workers.tasks.resolve import cached_splits
    from workers.training.config import TrainConfig
    from workers.training.trainer import train

    splits = cached_splits(DataRequest("tweet-sentiment", train_limit=2000, eval_limit=1000))
    spec = text_input(splits.train.texts)
    ids, _ = encode_texts(spec, splits.eval.texts)

    def predictions(arch: str, seed: int) -> torch.Tensor:
        settings = ModelSettings(arch, splits.num_classes, spec)
        model = settings.build(seed)
        train(model, splits.train, TrainConfig(**recipe_for(arch).train_fields(), seed=seed), settings=settings)
        with torch.no_grad():
            return model.eval()(ids).argmax(1)

    linear = [predictions("text-linear", seed) for seed in (0, 1)]
    bags = [predictions("text-bag", seed) for seed in (0, 1)]
    accuracy = (linear[0] == splits.eval.labels).float().mean().item()
    assert accuracy > 0.6  # it learned: 3 classes, the largest ~45 % of tweets
    differ = int((linear[0] != linear[1]).sum())
    assert differ <= 10  # 1 %; on all 27k training tweets 0.4 % (docs/benchmarks/quality.md, baselines)
    assert int((bags[0] != bags[1]).sum()) > differ


def test_inverse_document_frequency_by_hand():
    """Rows [5, 6, 5, pad] and [6, pad, pad, pad], vocab 10, 7 buckets (features as above: 5, 6 and the
    bigrams 15 = (5, 6), 11 = (6, 5)): n = 2; df 5 → 1, 6 → 2, 15 → 1, 11 → 1, so idf = ln(3/2) + 1 for
    5, 15 and 11, ln(3/3) + 1 = 1 for 6; features no row holds (padding 0 too) get 0. Batches add up."""
    from workers.models.text import inverse_document_frequency

    rows = torch.tensor([[5, 6, 5, 0], [6, 0, 0, 0]])
    idf = inverse_document_frequency([rows], vocab_size=10, buckets=7)
    rare = math.log(3 / 2) + 1
    expected = torch.zeros(17)
    expected[[5, 15, 11]], expected[6] = rare, 1.0
    assert torch.allclose(idf, expected)
    assert torch.allclose(inverse_document_frequency([rows[:1], rows[1:]], 10, 7), expected)


def test_text_linear_features_are_scikit_learns_tf_idf():
    """On the same tokens (ids as words, bigram buckets wide enough for no collision), ngram_features
    with the idf of the training rows equals TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True)'s
    rows, for the training rows and for a new row with unseen 1–2-grams (dropped, as sklearn drops them)."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    from workers.models.text import inverse_document_frequency

    spec = text_input(TEXTS, "wordpiece", vocab_size=400, max_length=32)
    ids, _ = encode_texts(spec, TEXTS)
    buckets = 2**20
    idf = inverse_document_frequency([ids], spec.vocab_size, buckets)

    def words(row: torch.Tensor) -> str:
        return " ".join(f"t{int(i)}" for i in row if i != 0)

    vectorizer = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, token_pattern=r"\S+", lowercase=False)
    vectorizer.fit([words(row) for row in ids])
    new = torch.cat([ids[:2], torch.tensor([[ids[0, 0], ids[5, 1], spec.vocab_size - 1] + [0] * (ids.shape[1] - 3)])])
    expected = vectorizer.transform([words(row) for row in new]).toarray()
    features, x = ngram_features(new, spec.vocab_size, buckets, idf)
    for row in range(len(new)):
        ours: dict[int, float] = {}
        for f, w in zip(features[row].tolist(), x[row].tolist(), strict=True):
            ours[f] = ours.get(f, 0.0) + w
        ours_sorted = sorted(round(w, 5) for w in ours.values() if w > 0)
        theirs = sorted(round(float(w), 5) for w in expected[row] if w > 0)
        assert ours_sorted == theirs, row


def test_text_linear_reads_the_idf_its_input_carries_and_a_checkpoint_keeps_it(tmp_path):
    """text_inputs gives the bags (text-linear, text-bag) their idf over the training texts and 512
    tokens, and text-cnn neither; the model weighs by it (other logits than without), and a saved
    version reloads with the same logits."""
    from orchestrator.planning.model_inputs import text_inputs
    from pipelines.spec import parse_spec
    from workers.data.dataset_splits import load_splits
    from workers.data.input_spec import unpack_weights
    from workers.models.checkpoints import ModelSettings, read_checkpoint, save_checkpoint
    from workers.models.text import BIGRAM_BUCKETS, LINEAR_BUCKETS, inverse_document_frequency

    train = load_splits("tweet-sentiment", train_limit=300).train
    document = {"model": "m", "version": "v1", "arch": "text-linear", "data": {"dataset": "tweet-sentiment"}}
    inputs = text_inputs(parse_spec(document), train)
    assert inputs.max_length == 512 and inputs.term_weights is not None
    ids, _ = encode_texts(inputs, train.texts)
    assert torch.equal(
        torch.from_numpy(unpack_weights(inputs.term_weights)),
        inverse_document_frequency([ids], inputs.vocab_size, LINEAR_BUCKETS),
    )
    bag = text_inputs(parse_spec({**document, "arch": "text-bag"}), train)
    assert bag.max_length == 512 and bag.term_weights is not None
    assert torch.equal(
        torch.from_numpy(unpack_weights(bag.term_weights)),
        inverse_document_frequency([ids], bag.vocab_size, BIGRAM_BUCKETS),
    )
    cnn = text_inputs(parse_spec({**document, "arch": "text-cnn"}), train)
    assert cnn.term_weights is None and cnn.max_length == 128

    settings = ModelSettings("text-linear", 3, inputs)
    model = settings.build(0)
    with torch.no_grad():
        model.weights.weight.normal_()
    plain = TextLinear(inputs.vocab_size, 3)
    plain.load_state_dict(model.state_dict())
    assert "idf" not in model.state_dict()  # part of the input, not of the weights
    assert not torch.allclose(model(ids[:20]), plain(ids[:20]))
    save_checkpoint(tmp_path / "v.pt", model, settings)
    record = read_checkpoint(tmp_path / "v.pt")
    again = ModelSettings.from_record(record["model"])
    reloaded = again.build(1)
    reloaded.load_state_dict(record["state_dict"])
    assert torch.allclose(reloaded(ids[:20]), model(ids[:20]))
