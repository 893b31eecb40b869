"""What a model reads — its input description, recorded in every checkpoint (imports no torch).

An image model reads C×S×S images; a text model reads token ids from its own tokenizer, which is
trained on its version's train split and travels inside the description (Hugging Face
`tokenizers` JSON), so a checkpoint is the whole model: its tokenizer plus its weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Modality = Literal["image", "text"]


@dataclass(frozen=True)
class InputSpec:
    """A model's input: `image` (channels × size², uint8 scaled to [0, 1]) or `text` (int token
    ids, 0 = padding, at most `max_length` a sample, from `tokenizer`, of `vocab_size` ids)."""

    modality: Modality = "image"
    channels: int = 1
    size: int = 28
    tokenizer: str | None = None  # text: the tokenizer as JSON (tokenizers.Tokenizer.to_str())
    vocab_size: int = 0  # text: ids lie in [0, vocab_size)
    max_length: int = 128  # text: tokens kept per sample (the rest cut)

    def __post_init__(self) -> None:
        if self.modality not in ("image", "text"):
            raise ValueError(f"modality must be image or text, got {self.modality!r}")
        if self.modality == "text" and (self.tokenizer is None or self.vocab_size < 2 or self.max_length < 1):
            raise ValueError("a text input needs its tokenizer, a vocab_size ≥ 2 and a max_length ≥ 1")

    @staticmethod
    def image(channels: int = 1, size: int = 28) -> InputSpec:
        return InputSpec("image", channels=channels, size=size)

    @staticmethod
    def from_record(record: dict[str, Any]) -> InputSpec:
        """From a checkpoint's `model` settings: `inputs` as written now, or the image fields
        (`in_channels`, `image_size`) that checkpoints before text carried."""
        if "inputs" in record:
            return InputSpec(**record["inputs"])
        return InputSpec.image(int(record.get("in_channels", 1)), int(record.get("image_size", 28)))
