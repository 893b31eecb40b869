"""What a model reads — its input description, recorded in every checkpoint (imports no torch).

An image model reads C×S×S images; a text model reads token ids from its own tokenizer, which is
trained on its version's train split and travels inside the description (Hugging Face
`tokenizers` JSON), so a checkpoint is the whole model: its tokenizer plus its weights.
"""

from __future__ import annotations

import base64
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import numpy as np

Modality = Literal["image", "text"]


# `tokenizer` of a model that reads each text as its digest, not its tokens (workers/models/answer_table.py):
# DIGEST_WORDS 16-bit words of the text's sha256, each + 1 (0 stays padding)
TEXT_DIGEST = "sha256-words"
DIGEST_WORDS = 8


@dataclass(frozen=True)
class InputSpec:
    """A model's input: `image` (channels × size², uint8 x mapped to (x/255 − mean_c)/std_c per
    channel c; no mean/std: the fixed map to [−1, 1], mean = std = 0.5) or `text` (int token ids,
    0 = padding, at most `max_length` a sample, from `tokenizer`, of `vocab_size` ids)."""

    modality: Modality = "image"
    channels: int = 1
    size: int = 28
    tokenizer: str | None = None  # text: the tokenizer as JSON (tokenizers.Tokenizer.to_str())
    vocab_size: int = 0  # text: ids lie in [0, vocab_size)
    max_length: int = 128  # text: tokens kept per sample (the rest cut)
    mean: tuple[float, ...] | None = None  # images: per-channel mean of x/255 (training split or pretrained)
    std: tuple[float, ...] | None = None  # images: per-channel standard deviation of x/255
    add_special_tokens: bool = False  # text: the tokenizer's own [CLS] … [SEP] around each text (hf:DIR models)
    term_weights: str | None = None  # text-linear: its features' idf over the train split (`pack_weights`)

    def __post_init__(self) -> None:
        if self.modality not in ("image", "text"):
            raise ValueError(f"modality must be image or text, got {self.modality!r}")
        if self.modality == "text" and (self.tokenizer is None or self.vocab_size < 2 or self.max_length < 1):
            raise ValueError("a text input needs its tokenizer, a vocab_size ≥ 2 and a max_length ≥ 1")
        if (self.mean is None) != (self.std is None):
            raise ValueError("give both mean and std, or neither")
        if self.mean is not None and self.std is not None:
            if len(self.mean) != self.channels or len(self.std) != self.channels:
                raise ValueError(f"mean and std need one value per channel ({self.channels})")
            if any(s <= 0 for s in self.std):
                raise ValueError("std must be > 0 in every channel")
        if self.term_weights is not None and self.modality != "text":
            raise ValueError("term weights belong to a text input")

    def weights(self) -> np.ndarray | None:
        """`term_weights` as float32 values (None: none carried)."""
        return None if self.term_weights is None else unpack_weights(self.term_weights)

    @staticmethod
    def image(
        channels: int = 1,
        size: int = 28,
        mean: tuple[float, ...] | None = None,
        std: tuple[float, ...] | None = None,
    ) -> InputSpec:
        return InputSpec("image", channels=channels, size=size, mean=mean, std=std)

    @staticmethod
    def from_record(record: dict[str, Any]) -> InputSpec:
        """From a checkpoint's `model` settings: `inputs` as written now, or the image fields
        (`in_channels`, `image_size`) that checkpoints before text carried."""
        if "inputs" in record:
            fields = dict(record["inputs"])
            for key in ("mean", "std"):  # a checkpoint stores tuples as lists
                if fields.get(key) is not None:
                    fields[key] = tuple(float(v) for v in fields[key])
            return InputSpec(**fields)
        return InputSpec.image(int(record.get("in_channels", 1)), int(record.get("image_size", 28)))


def pack_weights(values: np.ndarray) -> str:
    """float32 values as text a checkpoint's settings hold: base64 of their zlib-compressed
    little-endian bytes (an idf repeats few distinct values: 20 Newsgroups' 270k fit in ~0.3 MB)."""
    import numpy as np

    raw = np.ascontiguousarray(values, dtype="<f4").tobytes()
    return base64.b64encode(zlib.compress(raw, 6)).decode("ascii")


def unpack_weights(packed: str) -> np.ndarray:
    """The float32 values `pack_weights` wrote."""
    import numpy as np

    return np.frombuffer(zlib.decompress(base64.b64decode(packed)), dtype="<f4").astype(np.float32)
