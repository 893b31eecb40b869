"""BCWI: backward-compatible weight interpolation (Schumann et al. 2023)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from workers.data.input_spec import InputSpec
from workers.data.split_port import Split
from workers.metrics import error_rate, negative_flip_rate
from workers.models.predict import predict_logits


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


def sweep_bcwi(
    old_state: dict[str, torch.Tensor],
    new_state: dict[str, torch.Tensor],
    evaluate: Callable[[dict[str, torch.Tensor]], tuple[float, float]],
    alphas: Sequence[float],
    er_tolerance: float,
) -> tuple[float, list[dict[str, float]]]:
    """Pick BCWI's α after training: `evaluate(state) -> (ER, NFR)` on a validation split for each
    α; the pick is the lowest NFR among the α whose ER ≤ ER(α = 0, the fine-tuned model) + tolerance.
    Returns (α, table of {alpha, error_rate, nfr})."""
    table = []
    for alpha in sorted(set(alphas) | {0.0}):
        er, nfr = evaluate(interpolate_state_dicts(old_state, new_state, alpha))
        table.append({"alpha": alpha, "error_rate": er, "nfr": nfr})
    limit = table[0]["error_rate"] + er_tolerance
    best = min((row for row in table if row["error_rate"] <= limit), key=lambda row: (row["nfr"], row["alpha"]))
    return best["alpha"], table


@dataclass(frozen=True)
class BcwiChoice:
    alpha: float
    sweep: list[dict[str, float]]
    state_dict: dict[str, torch.Tensor]  # θ at the picked α


def select_bcwi(
    old: nn.Module,
    tuned: nn.Module,
    val: Split,
    alphas: Sequence[float],
    er_tolerance: float,
    device: str | torch.device = "cpu",
    inputs: InputSpec | None = None,
) -> BcwiChoice:
    """BCWI's α on the validation split: the lowest val NFR (against `old`) among the α whose val ER
    ≤ ER(α = 0) + `er_tolerance` (see `sweep_bcwi`); `tuned` (fine-tuned from `old`) is left as it
    was. Both read `inputs` (one architecture, so one tokenizer for text). Used by the pipeline and
    the fidelity benchmark alike."""
    old_state = {k: v.detach().clone() for k, v in old.state_dict().items()}
    tuned_state = {k: v.detach().clone() for k, v in tuned.state_dict().items()}
    encoded = val.for_inference(inputs)
    old_val = predict_logits(old.to(device), encoded, device=device, inputs=inputs)
    probe = tuned.to(device)

    def evaluate(state: dict[str, torch.Tensor]) -> tuple[float, float]:
        probe.load_state_dict(state)
        logits = predict_logits(probe, encoded, device=device, inputs=inputs)
        return error_rate(logits, val.labels), negative_flip_rate(old_val, logits, val.labels)

    alpha, sweep = sweep_bcwi(old_state, tuned_state, evaluate, alphas, er_tolerance)
    tuned.load_state_dict(tuned_state)
    return BcwiChoice(alpha, sweep, interpolate_state_dicts(old_state, tuned_state, alpha))
