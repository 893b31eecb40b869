"""BCWI: backward-compatible weight interpolation (Schumann et al. 2023)."""

from __future__ import annotations

import torch


def interpolate_state_dicts(
    old: dict[str, torch.Tensor], new: dict[str, torch.Tensor], alpha: float
) -> dict[str, torch.Tensor]:
    """θ = α·θ_old + (1−α)·θ_new for every parameter and floating buffer (BatchNorm running mean
    and variance included: interpolated, not recomputed). Integer buffers such as BatchNorm's
    `num_batches_tracked` are taken from the new model. Both dicts must have the same keys/shapes."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1], got {alpha}")
    if old.keys() != new.keys():
        missing = sorted(set(old) ^ set(new))[:3]
        raise ValueError(f"state_dicts differ in keys (e.g. {missing}); BCWI needs one architecture")
    mixed = {}
    for name, new_value in new.items():
        old_value = old[name]
        if old_value.shape != new_value.shape:
            raise ValueError(f"{name}: shape {tuple(old_value.shape)} vs {tuple(new_value.shape)}")
        if new_value.is_floating_point():
            mixed[name] = alpha * old_value.to(new_value.dtype) + (1.0 - alpha) * new_value
        else:
            mixed[name] = new_value.clone()
    return mixed
