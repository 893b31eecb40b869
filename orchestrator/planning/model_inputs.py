"""What a version's models read and start from, settled in preflight: the image normalisation or
the tokenizer (`InputSpec`), and the checks that `init`'s weights exist and fit the model."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from orchestrator.planning.plan import adapter_of
from pipelines.sections import BAG_LENGTH, BUILT_IN_LENGTH, LENGTH_CAP, LENGTH_PERCENTILE, LENGTH_SAMPLE
from pipelines.spec import SpecError, UpdateSpec
from workers.data.input_spec import InputSpec
from workers.data.split_port import Split
from workers.digests import file_sha256, folder_sha256
from workers.models.starting_weights import InitError, check_available
from workers.names import is_hf, is_torchvision_weights

if TYPE_CHECKING:
    from workers.models.hf import HfDirectory


def check_init_available(spec: UpdateSpec) -> None:
    """SpecError unless `init`'s file (or torchvision's cached one) can be read here, no network."""
    if spec.init is None or spec.init == "old":
        return
    try:
        check_available(spec.arch, spec.init)
    except InitError as e:
        raise SpecError(str(e)) from None


def check_init_fits(spec: UpdateSpec, num_classes: int, inputs: InputSpec) -> None:
    """SpecError unless `init`'s weights load into the version's model (built once here, so a file
    of another architecture fails before any Ray work, not in a worker), and unless `train.adapter`'s
    targets name layers of an hf:DIR model. `init: old` is checked against the old checkpoint by
    preflight."""
    from workers.models.adapters import AdapterError
    from workers.models.checkpoints import ModelSettings
    from workers.models.hf import hf_directory, read_directory
    from workers.models.starting_weights import initialise

    if spec.train.adapter is not None and is_hf(spec.arch):
        config = read_directory(str(hf_directory(spec.arch))).config
        try:
            ModelSettings(spec.arch, num_classes, inputs, config, adapter_of(spec)).build()
        except AdapterError as e:
            raise SpecError(str(e)) from None
    if spec.init is None or spec.init == "old":
        return
    model = ModelSettings(spec.arch, num_classes, inputs).build(allow_user_factories=spec.allow_user_factories)
    try:
        initialise(model, spec.arch, spec.init)
    except InitError as e:
        raise SpecError(str(e)) from None


def file_digest(path: str) -> str:
    """sha256 of a file's bytes (workers/digests.py); 16 hex digits."""
    return file_sha256(path)[:16]


def directory_digest(path: str) -> str:
    """sha256 over a directory's files (relative names and bytes, in name order); 16 hex digits."""
    return folder_sha256(path)[:16]


def image_inputs(spec: UpdateSpec, train: Split) -> InputSpec | None:
    """How the version's models normalise images: the pretrained weights' own mean and std for a
    torchvision `init`, the training split's per channel with `data.image_size` (over every image of
    a held split, STATISTICS_SAMPLE images spread over a streamed one), else None (the fixed map to
    [−1, 1], which every image result before per-channel normalisation used)."""
    from workers.data.augment import channel_statistics
    from workers.models.starting_weights import pretrained_normalisation

    channels, size = train.in_channels, train.image_size
    if spec.init is not None and is_torchvision_weights(spec.init):
        return InputSpec.image(channels, size, *pretrained_normalisation(spec.arch, spec.init, channels))
    if spec.data.image_size is not None:
        return InputSpec.image(channels, size, *channel_statistics(train.statistics_images(STATISTICS_SAMPLE)))
    return None


STATISTICS_SAMPLE = 4096  # images of a streamed train split the channel statistics are taken over (spread evenly)
TOKENIZER_SAMPLE = 200_000  # texts of a streamed train split a tokenizer trains on


def text_inputs(spec: UpdateSpec, train: Split) -> InputSpec:
    """The version's tokenizer (`tokenizer` section), trained on its train split's texts, and for a
    bag of n-grams (text-linear, text-bag) its 1–2-grams' idf over the same texts (`with_idf`); for
    `hf:DIR` the directory's own, with its special tokens, cut at `tokenizer.max_length` (auto: a
    percentile of the training texts' token counts, `hf_token_length`)."""
    from workers.data.tokenizer import text_input
    from workers.models.hf import hf_directory, read_directory

    if train.modality != "text":
        raise SpecError("tokenizer: only text data has a tokenizer")
    t = spec.tokenizer
    if is_hf(spec.arch):
        found = read_directory(str(hf_directory(spec.arch)))  # preflight's resolve_factory read it already
        length = t.max_length if t.max_length != "auto" else hf_token_length(found, train)
        return InputSpec(
            "text", tokenizer=found.tokenizer, vocab_size=found.vocab_size, max_length=length, add_special_tokens=True
        )
    from workers.models.text import BAG_BUCKETS, with_idf

    bag = spec.arch in BAG_BUCKETS
    length = t.max_length if t.max_length != "auto" else BAG_LENGTH if bag else BUILT_IN_LENGTH
    texts = train.tokenizer_texts(TOKENIZER_SAMPLE)
    inputs = text_input(texts, t.kind, t.vocab_size, length)
    return with_idf(inputs, texts, spec.arch) if bag else inputs  # a bag's n-grams weighed by their idf


def hf_token_length(found: HfDirectory, train: Split) -> int:
    """`tokenizer.max_length: auto` for an hf:DIR model: the LENGTH_PERCENTILE-th percentile of the
    token counts of LENGTH_SAMPLE training texts (evenly spaced over the split's texts), rounded up to a
    multiple of 8, at most LENGTH_CAP and the model's position count (`max_position_embeddings`)."""
    from workers.data.tokenizer import length_percentile

    texts = train.tokenizer_texts(LENGTH_SAMPLE)
    if len(texts) > LENGTH_SAMPLE:
        texts = [texts[i * len(texts) // LENGTH_SAMPLE] for i in range(LENGTH_SAMPLE)]
    positions = json.loads(found.config).get("max_position_embeddings") or LENGTH_CAP
    return length_percentile(found.tokenizer, texts, LENGTH_PERCENTILE, min(LENGTH_CAP, positions))
