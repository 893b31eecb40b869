"""Checkpoints: a state_dict plus the settings that built the model, loaded without pickle."""

from __future__ import annotations

import os
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from workers.data.input_spec import InputSpec
from workers.errors import first_line
from workers.models.adapters import LoraSettings, attach_lora
from workers.models.architectures import build_model


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded; the message names the file and the problem."""


@dataclass(frozen=True)
class ModelSettings:
    """Everything needed to rebuild a registry model before loading its weights: its architecture,
    its classes and what it reads (for a text model, its tokenizer), and for an `hf:DIR` model its config."""

    arch: str
    num_classes: int
    inputs: InputSpec = InputSpec()
    config: str | None = None  # hf:DIR models: the directory's config.json (the checkpoint needs no DIR)
    adapter: LoraSettings | None = None  # hf:DIR models trained as a LoRA adapter on the frozen base

    def build(self, seed: int = 0, allow_user_factories: bool = False) -> nn.Module:
        """The model with weights from `seed` (its adapter's too), before any checkpoint is loaded."""
        model = build_model(self.arch, self.num_classes, self.inputs, seed, allow_user_factories, self.config)
        return model if self.adapter is None else self.build_adapter(model, seed)

    def build_adapter(self, model: nn.Module, seed: int = 0) -> nn.Module:
        """`model` with this settings' adapter attached, its weights from `seed` (the global RNG is left
        untouched): after the base's starting weights are in."""
        if self.adapter is None:
            return model
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed + 1)  # not the base's own draws again
            return attach_lora(model, self.adapter)

    @staticmethod
    def from_record(record: dict[str, Any]) -> ModelSettings:
        """From a checkpoint's `model` entry, also as checkpoints before text wrote it (image fields)."""
        config = record.get("config")
        return ModelSettings(
            str(record["arch"]),
            int(record["num_classes"]),
            InputSpec.from_record(record),
            None if config is None else str(config),
            LoraSettings.from_record(record.get("adapter")),
        )


def save_checkpoint(path: str | os.PathLike, model: nn.Module, settings: ModelSettings, **extra: Any) -> Path:
    """Write {"model": settings, "state_dict": …, **extra} atomically (temp file + rename).

    `extra` must hold tensors, numbers, strings, lists or dicts of those (weights-only loadable)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    tmp = path.with_name(path.name + ".tmp")
    torch.save({"model": asdict(settings), "state_dict": state, **extra}, tmp)
    os.replace(tmp, path)
    return path


_ZIP_MAGIC, _PICKLE_PROTOCOL = b"PK\x03\x04", 0x80  # how files of torch.save begin (zip; legacy pickle)


def _load_problem(error: Exception) -> str:
    """Why torch.load failed, in a whole line: for a weights-only refusal the line that names what
    was refused (torch's first line only advises loading the file unsafely), else the first line."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    if lines and lines[0].startswith("Weights only load failed"):
        detail = [
            line for line in lines[1:] if not line.startswith(("Please file an issue", "Check the documentation"))
        ]
        return f"{type(error).__name__}: {detail[0] if detail else 'it holds objects a weights-only load refuses'}"
    return f"{type(error).__name__}: {first_line(error)}" if lines else type(error).__name__


def load_weights_only(path: str | os.PathLike) -> Any:
    """`torch.load(path, weights_only=True)` on the CPU, without the warning torch prints on stderr
    for a pickle protocol its weights-only unpickler was not written for: such a file is read or
    refused, and the caller says which in one line of its own."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
        return torch.load(path, map_location="cpu", weights_only=True)


def read_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Load the checkpoint dict with `weights_only=True` (no pickle code execution)."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such checkpoint") from None
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read ({e.strerror or e})") from None
    if not head.startswith(_ZIP_MAGIC) and head[:1] != bytes([_PICKLE_PROTOCOL]):
        raise CheckpointError(
            f"{path}: not a readable checkpoint (not a file torch.save writes: neither a zip archive nor a pickle)"
        )
    try:
        checkpoint = load_weights_only(path)
    except Exception as e:  # noqa: BLE001 - torch raises many types for truncated or foreign files
        raise CheckpointError(f"{path}: not a readable checkpoint ({_load_problem(e)})") from None
    if not isinstance(checkpoint, dict) or "model" not in checkpoint or "state_dict" not in checkpoint:
        raise CheckpointError(f"{path}: not a Congruent checkpoint (needs 'model' settings and 'state_dict')")
    return checkpoint


def classes_seen_of(path: str | os.PathLike) -> list[int] | None:
    """The checkpoint's `classes_seen`: the class ids its model was trained on (None: not
    recorded, take all)."""
    seen = read_checkpoint(path).get("classes_seen")
    if seen is None:
        return None
    if not isinstance(seen, (list, tuple)) or not all(isinstance(c, int) and not isinstance(c, bool) for c in seen):
        raise CheckpointError(f"{path}: classes_seen must be a list of class ids, got {type(seen).__name__}")
    return [int(c) for c in seen]


def load_model(path: str | os.PathLike, allow_user_factories: bool = False) -> tuple[nn.Module, ModelSettings]:
    """Rebuild the model a checkpoint describes and load its weights (strict), in eval mode."""
    checkpoint = read_checkpoint(path)
    try:
        settings = ModelSettings.from_record(checkpoint["model"])
    except (TypeError, KeyError, ValueError) as e:
        raise CheckpointError(f"{path}: bad model settings ({e})") from None
    model = settings.build(allow_user_factories=allow_user_factories)
    try:
        model.load_state_dict(checkpoint["state_dict"])
    except RuntimeError as e:
        raise CheckpointError(f"{path}: weights do not fit architecture {settings.arch!r} ({first_line(e)})") from None
    return model.eval(), settings
