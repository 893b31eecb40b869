"""A split as one model reads it: the one place where samples become model input.

Every modality answers the same three questions — how many samples, what a training batch (sample
indices plus augmentation draws, workers/data/batches.py) looks like as model input on a device,
and what samples i…j look like for inference — so the trainer, the teachers and the evaluation
never ask which modality they hold:

- images: the uint8 N×C×H×W tensor itself; a batch is gathered, augmented and normalised as the
  reading model's InputSpec says (per-channel mean/std, or the fixed map to [−1, 1]).
- text: token ids from the model's own tokenizer (int32 N×L, 0 = padding), computed once per
  (tokenizer, split) and cached; a batch is cut to its longest sample (the models mask padding).

A held split (`ImageSet`, `TextSet`) makes its `EncodedSplit` with `encoded(inputs)` (the split
port, workers/data/split_port.py). A source larger than memory is a `StreamedSplit` instead
(workers/data/streamed.py): its batches carry their samples, and `StreamedInputs` answers `batch` for
them; see docs/architecture.md.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from workers.data.augment import to_model_input
from workers.data.batches import Batch, batch_inputs
from workers.data.input_spec import InputSpec


@dataclass(frozen=True)
class EncodedSplit:
    """`values`: uint8 images N×C×H×W, or int32 token ids N×L with their `lengths` (int64 N)."""

    values: torch.Tensor
    lengths: torch.Tensor | None = None  # text only
    mean: tuple[float, ...] | None = None  # images: the reading model's per-channel normalisation
    std: tuple[float, ...] | None = None

    @property
    def modality(self) -> str:
        return "image" if self.lengths is None else "text"

    def __len__(self) -> int:
        return len(self.values)

    def to(self, device: torch.device | str) -> EncodedSplit:
        lengths = None if self.lengths is None else self.lengths.to(device)
        return EncodedSplit(self.values.to(device), lengths, self.mean, self.std)

    def batch(self, batch: Batch) -> torch.Tensor:
        """A training batch as model input on this split's device: augmented float images, or
        token ids cut to the batch's longest sample (augmentation draws do not apply to text)."""
        if self.lengths is None:
            return batch_inputs(self.values, batch, self.mean, self.std)
        index = batch.indices.to(self.values.device, torch.long)
        return self._ids(self.values[index], self.lengths[index])

    def rows(self, start: int, stop: int) -> torch.Tensor:
        """Samples start…stop−1 as model input, unaugmented (inference)."""
        if self.lengths is None:
            return to_model_input(self.values[start:stop], self.mean, self.std)
        return self._ids(self.values[start:stop], self.lengths[start:stop])

    @staticmethod
    def _ids(ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        longest = max(1, int(lengths.max())) if len(lengths) else 1
        return ids[:, :longest].long()


_TEXT_CACHE: OrderedDict[tuple[str, str, int, bool], EncodedSplit] = OrderedDict()
_TEXT_CACHE_SIZE = 8


def encoded_texts(fingerprint: str, texts: Sequence[str], inputs: InputSpec | None) -> EncodedSplit:
    """Texts (whose content `fingerprint` names) as a model with `inputs` reads them: token ids of its
    tokenizer, computed once per (texts, tokenizer) in this process (`TextSet.encoded`)."""
    if inputs is None or inputs.modality != "text" or inputs.tokenizer is None:
        raise ValueError("text is read through a text model's tokenizer: give its InputSpec")
    from workers.data.tokenizer import encode_texts

    key = (
        fingerprint,
        hashlib.sha256(inputs.tokenizer.encode()).hexdigest(),
        inputs.max_length,
        inputs.add_special_tokens,
    )
    if key in _TEXT_CACHE:
        _TEXT_CACHE.move_to_end(key)
        return _TEXT_CACHE[key]
    ids, lengths = encode_texts(inputs, texts)
    encoded = EncodedSplit(ids, lengths)
    _TEXT_CACHE[key] = encoded
    while len(_TEXT_CACHE) > _TEXT_CACHE_SIZE:
        _TEXT_CACHE.popitem(last=False)
    return encoded


def encoded_images(images: torch.Tensor, inputs: InputSpec | None) -> EncodedSplit:
    """uint8 images as a model with `inputs` reads them: the tensor itself, with the model's
    per-channel normalisation (none: the fixed map to [−1, 1]) (`ImageSet.encoded`)."""
    if inputs is not None and inputs.modality != "image":
        raise ValueError(f"a model that reads {inputs.modality} cannot read images")
    if inputs is None:
        return EncodedSplit(images)
    return EncodedSplit(images, None, inputs.mean, inputs.std)
