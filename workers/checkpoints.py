"""Checkpoints: a state_dict plus the settings that built the model, loaded without pickle."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from workers.models import build_model


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded; the message names the file and the problem."""


@dataclass(frozen=True)
class ModelSettings:
    """Everything needed to rebuild a registry model before loading its weights."""

    arch: str
    num_classes: int
    in_channels: int = 1
    image_size: int = 28

    def build(self, seed: int = 0, allow_user_factories: bool = False) -> nn.Module:
        return build_model(self.arch, self.num_classes, self.in_channels, self.image_size, seed, allow_user_factories)


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


def read_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Load the checkpoint dict with `weights_only=True` (no pickle code execution)."""
    path = Path(path)
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such checkpoint") from None
    except Exception as e:  # torch raises many types for truncated or foreign files
        raise CheckpointError(f"{path}: not a readable checkpoint ({type(e).__name__}: {str(e)[:120]})") from None
    if not isinstance(checkpoint, dict) or "model" not in checkpoint or "state_dict" not in checkpoint:
        raise CheckpointError(f"{path}: not a Congruent checkpoint (needs 'model' settings and 'state_dict')")
    return checkpoint


def classes_seen(path: str | os.PathLike) -> tuple[int, ...] | None:
    """The class ids the checkpoint's model was trained on (None: not recorded, take all)."""
    seen = read_checkpoint(path).get("classes_seen")
    return None if seen is None else tuple(int(c) for c in seen)


def load_model(path: str | os.PathLike, allow_user_factories: bool = False) -> tuple[nn.Module, ModelSettings]:
    """Rebuild the model a checkpoint describes and load its weights (strict), in eval mode."""
    checkpoint = read_checkpoint(path)
    try:
        settings = ModelSettings(**checkpoint["model"])
    except TypeError as e:
        raise CheckpointError(f"{path}: bad model settings ({e})") from None
    model = settings.build(allow_user_factories=allow_user_factories)
    try:
        model.load_state_dict(checkpoint["state_dict"])
    except RuntimeError as e:
        first = str(e).strip().splitlines()[0]
        raise CheckpointError(f"{path}: weights do not fit architecture {settings.arch!r} ({first})") from None
    return model.eval(), settings
