"""BCWI: backward-compatible weight interpolation (Schumann et al. 2023)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from workers.data.input_spec import InputSpec
from workers.data.split_port import Split
from workers.metrics import class_ids, error_rate, negative_flip_rate
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
    predict: Callable[[dict[str, torch.Tensor]], torch.Tensor],
    alphas: Sequence[float],
) -> dict[float, np.ndarray]:
    """Each α's class ids on a validation split, `predict(θ_α)` (α = 0, the fine-tuned model, always
    included), in increasing α."""
    alphas = sorted(set(alphas) | {0.0})
    return {alpha: class_ids(predict(interpolate_state_dicts(old_state, new_state, alpha))) for alpha in alphas}


def sweep_table(
    ids: dict[float, np.ndarray], old_ids: np.ndarray, labels: np.ndarray, rows: np.ndarray | None = None
) -> list[dict[str, float]]:
    """{alpha, error_rate, nfr} of each α over the samples `rows` selects (a boolean mask; all without)."""
    keep = np.ones(len(labels), bool) if rows is None else rows
    return [
        {
            "alpha": alpha,
            "error_rate": error_rate(predicted[keep], labels[keep]),
            "nfr": negative_flip_rate(old_ids[keep], predicted[keep], labels[keep]),
        }
        for alpha, predicted in ids.items()
    ]


def pick_alpha(table: Sequence[dict[str, float]], er_tolerance: float) -> float:
    """BCWI's rule: the lowest NFR among the α whose ER ≤ ER(α = 0, the fine-tuned model) + tolerance
    (ties: the smaller α). `table` from `sweep_table`, α = 0 first."""
    limit = table[0]["error_rate"] + er_tolerance
    eligible = [row for row in table if row["error_rate"] <= limit]
    return min(eligible, key=lambda row: (row["nfr"], row["alpha"]))["alpha"]


def val_halves(n: int, seed: int = 0) -> np.ndarray:
    """A fixed split of n validation samples into two halves (True: the first), by a seeded
    permutation, so that a split sorted by class is halved across classes."""
    first = np.zeros(n, bool)
    first[np.random.default_rng(seed).permutation(n)[: n // 2]] = True
    return first


def cross_fitted(
    ids: dict[float, np.ndarray], old_ids: np.ndarray, labels: np.ndarray, er_tolerance: float, first: np.ndarray
) -> tuple[dict[str, float], np.ndarray]:
    """BCWI's val ER and NFR as an estimate of the α it picks, not of the α that fits val best: α
    picked on one half (`pick_alpha`), its errors and flips counted on the other half, and the
    same with the halves swapped; ER = (errors_B(α_A) + errors_A(α_B)) / N, NFR alike (flips over
    all N). The α picked on the whole split scores itself on the samples it was picked on, which
    flatters it where val is small; this does not (cross-fitting, as in k-fold cross-validation).
    Returns the figures and the cross-fitted class ids (each sample's at the α the other half picked),
    what auto's paired tests count."""
    held = np.empty_like(labels)
    for pick_rows, score_rows in ((first, ~first), (~first, first)):
        held[score_rows] = ids[pick_alpha(sweep_table(ids, old_ids, labels, pick_rows), er_tolerance)][score_rows]
    wrong = held != labels
    figures = {
        "error_rate": int(wrong.sum()) / len(labels),
        "nfr": int((wrong & (old_ids == labels)).sum()) / len(labels),
    }
    return figures, held


def pick_held_out(
    ids: dict[float, np.ndarray], old_ids: np.ndarray, labels: np.ndarray, er_tolerance: float, first: np.ndarray
) -> tuple[float, dict[str, float], np.ndarray]:
    """BCWI's α held to its ER limit on cross-fitted figures, not on the figures of the samples it was
    picked on: the rule (`pick_alpha`) at the tolerance, and while the pick's cross-fitted ER
    (`cross_fitted`) exceeds ER(α = 0) + tolerance, the rule again at the next smaller tolerance
    the sweep offers (each α's own ER rise over α = 0), down to 0. NFR falls and ER rises with α,
    so the α the whole split picks lands at its limit and half the time above it on other samples;
    this keeps the pick inside. Returns (α, its cross-fitted {error_rate, nfr}, its cross-fitted class ids)."""
    table = sweep_table(ids, old_ids, labels)
    limit = table[0]["error_rate"] + er_tolerance
    rises = {row["error_rate"] - table[0]["error_rate"] for row in table}
    tolerances = sorted({er_tolerance, 0.0} | {r for r in rises if 0.0 <= r < er_tolerance}, reverse=True)
    for tolerance in tolerances:
        held, classes = cross_fitted(ids, old_ids, labels, tolerance, first)
        if held["error_rate"] <= limit + 1e-12 or tolerance == 0.0:
            return pick_alpha(table, tolerance), held, classes
    raise AssertionError("unreachable: the last tolerance is 0")


@dataclass(frozen=True)
class BcwiChoice:
    alpha: float
    sweep: list[dict[str, float]]
    state_dict: dict[str, torch.Tensor]  # θ at the picked α
    held_out: dict[str, float]  # {error_rate, nfr}: the pick's cross-fitted val figures (`cross_fitted`)
    held_out_classes: np.ndarray  # each val sample's class at the α the other half picked (`cross_fitted`)


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
    ≤ ER(α = 0) + `er_tolerance`, held to that limit on cross-fitted figures (`pick_held_out`);
    `tuned` (fine-tuned from `old`) is left as it was. Both read `inputs` (one architecture, so one
    tokenizer for text). `held_out`: the pick's cross-fitted val ER and NFR, what auto compares it
    on. Used by the pipeline and the fidelity benchmark alike."""
    old_state = {k: v.detach().clone() for k, v in old.state_dict().items()}
    tuned_state = {k: v.detach().clone() for k, v in tuned.state_dict().items()}
    encoded = val.for_inference(inputs)
    old_ids = class_ids(predict_logits(old.to(device), encoded, device=device, inputs=inputs))
    probe = tuned.to(device)

    def predict(state: dict[str, torch.Tensor]) -> torch.Tensor:
        probe.load_state_dict(state)
        return predict_logits(probe, encoded, device=device, inputs=inputs)

    ids = sweep_bcwi(old_state, tuned_state, predict, alphas)
    labels = class_ids(val.labels)
    sweep = sweep_table(ids, old_ids, labels)
    if len(labels) >= 2:  # two halves to cross
        alpha, held_out, held_classes = pick_held_out(ids, old_ids, labels, er_tolerance, val_halves(len(labels)))
    else:
        alpha = pick_alpha(sweep, er_tolerance)
        held_out = {k: v for k, v in next(r for r in sweep if r["alpha"] == alpha).items() if k != "alpha"}
        held_classes = ids[alpha]
    tuned.load_state_dict(tuned_state)
    state = interpolate_state_dicts(old_state, tuned_state, alpha)
    return BcwiChoice(alpha, sweep, state, held_out, held_classes)
