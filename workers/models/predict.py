"""Inference: the logits of a model over a split.

Model input is 4-D float images (kept channels-last) or 2-D token ids, as workers/data/encoded.py
makes it; inference takes either."""

from __future__ import annotations

import torch
from torch import nn

from workers.data.encoded import EncodedSplit, Samples, encode
from workers.data.input_spec import InputSpec
from workers.data.stream import StreamedSplit, streamed_inputs


def placed(inputs: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """Model input on `device`: images channels-last (NHWC: docs/benchmarks.md), token ids as they are."""
    if inputs.dim() == 4:
        return inputs.to(device, memory_format=torch.channels_last)
    return inputs.to(device)


@torch.no_grad()
def predict_logits(
    model: nn.Module,
    data: Samples | EncodedSplit | StreamedSplit,
    batch_size: int = 1024,
    device: str | torch.device = "cpu",
    inputs: InputSpec | None = None,
) -> torch.Tensor:
    """N×C logits of `model` (eval mode) on every sample of `data`, in order (a streamed split's
    fixed order, that of its labels), on the CPU; text is read through `inputs`' tokenizer (the
    model's own)."""
    was_training = model.training
    model.eval()
    chunks = []
    if isinstance(data, StreamedSplit):
        reader = streamed_inputs(data, inputs)
        for batch in data.chunks(batch_size, inputs):
            chunks.append(model(placed(reader.batch(batch), device)).float().cpu())
    else:
        encoded = data if isinstance(data, EncodedSplit) else encode(data, inputs)
        for start in range(0, len(encoded), batch_size):
            chunks.append(model(placed(encoded.rows(start, start + batch_size), device)).float().cpu())
    model.train(was_training)
    return torch.cat(chunks)
