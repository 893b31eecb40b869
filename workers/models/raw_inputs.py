"""A registered version answering raw inputs: texts through its own tokenizer, encoded images
decoded, resized and normalised as its InputSpec says; never its training data. What `congruent
serve`'s replicas and the registered MLflow pyfunc model (orchestrator/tracking/pyfunc_model.py)
both answer with."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from workers.data.augment import to_model_input
from workers.data.formats.image_folder import decode_image
from workers.data.tokenizer import encode_texts
from workers.errors import DataError
from workers.models.checkpoints import load_model, read_checkpoint
from workers.models.predict import forward_by_length


@dataclass(frozen=True)
class Answer:
    """A version's answer to one sample: its class id and that class's softmax probability."""

    class_id: int
    probability: float


class RawInputModel:
    """The model of a checkpoint (state_dict + settings) in eval mode, on `device`; DataError (one
    line, naming the input) for a sample it cannot read."""

    def __init__(self, checkpoint: str, device: str = "cpu", allow_user_factories: bool = False) -> None:
        self.model, self.settings = load_model(checkpoint, allow_user_factories)
        self.model.to(device)
        self.device = device
        names = read_checkpoint(checkpoint).get("classes")
        self.class_names: list[str] | None = [str(n) for n in names] if names else None

    @property
    def modality(self) -> str:
        return self.settings.inputs.modality

    def inputs(self, payloads: Sequence[str | bytes]) -> torch.Tensor:
        """The model's input of the samples: token ids, or normalised float images."""
        spec = self.settings.inputs
        if spec.modality == "text":
            ids, _ = encode_texts(spec, [str(p) for p in payloads])
            return ids
        images = []
        for i, payload in enumerate(payloads):
            if not isinstance(payload, bytes):
                raise DataError(f"input {i}: an image model reads encoded image bytes")
            images.append(decode_image(payload, f"input {i}", spec.channels, spec.size))
        return to_model_input(torch.from_numpy(np.stack(images)), spec.mean, spec.std)

    @torch.no_grad()
    def answer(self, payloads: Sequence[str | bytes]) -> list[Answer]:
        """Each sample's class and probability, in order."""
        values = self.inputs(payloads)
        logits = forward_by_length(self.model, values, self.device)
        probabilities = torch.softmax(logits, dim=1)
        best, classes = probabilities.max(dim=1)
        return [Answer(int(k), float(p)) for k, p in zip(classes.tolist(), best.tolist())]
