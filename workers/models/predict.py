"""Inference: the logits of a model over a split.

Model input is 4-D float images (kept channels-last) or 2-D token ids, as workers/data/encoded.py
makes it; inference takes either."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import NamedTuple

import torch
from torch import nn

from workers.data.encoded import EncodedSplit
from workers.data.input_spec import InputSpec
from workers.data.split_port import InferenceBatch, Split
from workers.runtime import release_free_memory

INFERENCE_BATCH_BYTES = 8 << 20  # float32 image input one inference batch may hold (copies scale with it)
TEXT_FORWARD_TOKENS = 8192  # token ids (rows × longest) one length-grouped text forward reads


class EncodedRows(NamedTuple):
    """Rows of an EncodedSplit as each reader's input (it holds no ids)."""

    inputs: list[torch.Tensor]
    ids: None
    labels: None


def inference_batch_size(batch_size: int, image_shape: tuple[int, ...] | None) -> int:
    """`batch_size`, made smaller where a batch of float32 images of `image_shape` (C, H, W) would
    hold more than INFERENCE_BATCH_BYTES: at 224 px a batch of 1024 is 600 MB, and its uint8
    original, its normalised copy and the model's first activations come on top. At 8 MiB rather
    than 32 the holes these copies leave in glibc's heap stay small: an inference pass over 14,613
    128-px images peaked 0.2 GB above its start instead of 0.45, as fast. Token ids and small
    images keep `batch_size`; at least 1."""
    if image_shape is None:
        return batch_size
    per_sample = 4 * math.prod(image_shape)
    return max(1, min(batch_size, INFERENCE_BATCH_BYTES // per_sample))


def placed(inputs: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """Model input on `device`: images channels-last (NHWC: docs/benchmarks/index.md), token ids as they are."""
    if inputs.dim() == 4:
        return inputs.to(device, memory_format=torch.channels_last)
    return inputs.to(device)


@torch.no_grad()
def predict_logits(
    model: nn.Module,
    data: Split | EncodedSplit,
    batch_size: int = 1024,
    device: str | torch.device = "cpu",
    inputs: InputSpec | None = None,
) -> torch.Tensor:
    """N×C logits of `model` (eval mode) on every sample of `data`, in order (a streamed split's
    fixed order, that of its labels), on the CPU, `batch_size` samples at a time at most
    (`inference_batch_size`); text is read through `inputs`' tokenizer (the model's own)."""
    logits: torch.Tensor | None = None
    done = 0
    for chunk in logit_chunks({"model": (model, inputs)}, data, batch_size, device):
        out = chunk.logits["model"]
        if logits is None:
            # one buffer for every batch's output: a list of small per-batch outputs, each allocated
            # while that batch's input was alive, pins glibc's heap so that every input stays
            # resident (2.1 GB after 60 batches of 170 128-px images; 0.13 GB this way)
            logits = torch.empty(len(data), *out.shape[1:])
        logits[done : done + len(out)] = out
        done += len(out)
        del out, chunk
    if logits is None:
        return torch.empty(0, 0)
    assert done == len(logits), f"{done} samples predicted of {len(logits)}"
    return logits


class LogitChunk(NamedTuple):
    """{name: logits} of consecutive samples, and their ids and labels (None from an EncodedSplit)."""

    logits: dict[str, torch.Tensor]
    ids: torch.Tensor | None
    labels: torch.Tensor | None


@torch.no_grad()
def logit_chunks(
    models: Mapping[str, tuple[nn.Module, InputSpec | None]],
    data: Split | EncodedSplit,
    batch_size: int = 1024,
    device: str | torch.device = "cpu",
) -> Iterator[LogitChunk]:
    """{name: that model's logits (eval mode, on the CPU)} on consecutive batches of `data`, in
    order, with the samples' ids and labels: the split is read once, and every model, through its
    own `InputSpec` (normalisation, tokenizer), scores a batch before the next one is read."""
    modes = {name: model.training for name, (model, _) in models.items()}
    for model, _ in models.values():
        model.eval()
    try:
        for batch in _model_inputs(data, batch_size, [inputs for _, inputs in models.values()]):
            logits = {
                name: forward_by_length(model, values, device)
                for (name, (model, _)), values in zip(models.items(), batch.inputs)
            }
            yield LogitChunk(logits, batch.ids, batch.labels)
            del batch
    finally:
        for name, (model, _) in models.items():
            model.train(modes[name])
        release_free_memory()


def length_groups(lengths: torch.Tensor, tokens: int | None = None) -> list[torch.Tensor]:
    """Sample indices by ascending length, cut into groups of consecutive samples whose rows ×
    longest length stay within `tokens` (None: TEXT_FORWARD_TOKENS; at least one sample a group): a group of short texts
    holds many rows, one of long texts few, and none pays for the padding of the batch's longest."""
    tokens = TEXT_FORWARD_TOKENS if tokens is None else tokens
    order = torch.argsort(lengths, stable=True)
    ordered = lengths[order].clamp(min=1).tolist()
    groups, start = [], 0
    for end in range(1, len(ordered) + 1):
        if end == len(ordered) or (end - start + 1) * ordered[end] > tokens:
            groups.append(order[start:end])
            start = end
    return groups


def forward_by_length(
    model: nn.Module, values: torch.Tensor, device: torch.device | str, tokens: int | None = None
) -> torch.Tensor:
    """The model's float logits (on the CPU) of one inference batch. N×L token ids (0 = padding)
    are read in `length_groups`, each cut to its longest, and put back in order: the models mask
    padding, so the logits are those of the whole batch at once, at the cost of the tokens each
    sample holds (tweets: 33 on average where a batch of 1,024 pads to 119). Images: one forward."""
    if values.dim() != 2:
        return model(placed(values, device)).float().cpu()
    positions = torch.arange(1, values.shape[1] + 1)
    lengths = ((values != 0) * positions).amax(dim=1)  # the last token's position + 1
    out: torch.Tensor | None = None
    for group in length_groups(lengths, tokens):
        longest = max(1, int(lengths[group].max()))
        logits = model(placed(values[group, :longest], device)).float().cpu()
        if out is None:
            out = torch.empty(len(values), *logits.shape[1:])
        out[group] = logits
    return out if out is not None else model(placed(values, device)).float().cpu()


def _model_inputs(
    data: Split | EncodedSplit, batch_size: int, readers: Sequence[InputSpec | None]
) -> Iterator[InferenceBatch | EncodedRows]:
    """`data` as the input of each model that reads through one of `readers`, on the CPU, in order,
    at most `inference_batch_size` samples at a time (an `EncodedSplit` is already one model's input)."""
    if isinstance(data, EncodedSplit):
        shape = tuple(data.values.shape[1:]) if data.modality == "image" else None
        size = inference_batch_size(batch_size, shape)
        for start in range(0, len(data) if readers else 0, size):
            yield EncodedRows([data.rows(start, start + size) for _ in readers], None, None)
        return
    if readers:
        yield from data.inference_batches(inference_batch_size(batch_size, data.sample_shape), readers)
