"""Several replicas of one architecture trained in one process as one batched model.

Processes that share a GPU are time-sliced: m replicas as m processes run about as fast as one.
Here the m models' parameters and buffers are stacked (`torch.func.stack_module_state`) and one
`vmap(functional_call)` runs all of them in each kernel: replica r still has its own seed
(initialisation, data order, augmentation draws), its own loss, gradient-norm clip and momentum.
`PackedModels` supplies only how the m models step together; the epochs — resume, schedule,
validation, checkpoints in the trainer's own format — are `workers.training.epochs.run_epochs`, as for a
replica trained alone, so a packed replica's checkpoint is interchangeable with a solo one's (same
seed, same batches; weights equal up to float summation order).

    results = train_together(jobs, members)   # workers/tasks/bodies.py: replicas, plain CE, own seeds

BatchNorm's running statistics update inside vmap because the buffers are stacked too. Packed
replicas train in fp32 (`precision: fp32`, checked): vmap'd BatchNorm under CUDA's bf16 autocast
fails ("Expected running_mean to have type BFloat16"), so the plan gives packed replicas fp32.
Dropout draws its masks per replica (`vmap(randomness="different")`), as m separate trainings
would. The `compile` mode applies to the batched forward pass.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, stack_module_state, vmap

from workers.data import Batch
from workers.data.input_spec import InputSpec
from workers.data.split_port import Split
from workers.training.config import TrainConfig, compiled, make_optimizer, undecayed_names


class PackedModels:
    """A `Stepper` of k models of one architecture as one batched model: each step, model r's own
    batch through `vmap(functional_call)`, its own batch-mean cross-entropy, its own gradient clip."""

    def __init__(
        self, models: Sequence[nn.Module], data: Split, config: TrainConfig, inputs: InputSpec | None = None
    ) -> None:
        self.config, self.device = config, torch.device(config.device)
        self.plain = [model.to(self.device).train() for model in models]
        self.params, self.buffers = stack_module_state(list(self.plain))
        skeleton = copy.deepcopy(self.plain[0]).to("meta")

        def one_model(p: dict[str, torch.Tensor], b: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
            return functional_call(skeleton, (p, b), (x,))

        # randomness "different": each replica draws its own dropout masks (text-cnn, text-transformer)
        self.forward = compiled(vmap(one_model, randomness="different"), config.compile)
        # a held split's batches are indices into it (and its labels); a stream's carry their samples
        self.data, self.targets = data.reader(inputs).to(self.device), data.labels.to(self.device)
        self.optimizer: torch.optim.Optimizer = make_optimizer(
            self.params.items(), config, undecayed_names(self.plain[0])
        )

    def restore(self, states: Sequence[Mapping[str, Any]]) -> None:
        with torch.no_grad():
            for stacked in (self.params, self.buffers):
                for name, value in stacked.items():
                    value.copy_(torch.stack([state["state_dict"][name] for state in states]))
        self.optimizer.load_state_dict(_stacked_optimizer_state([state["optimizer"] for state in states]))

    def epoch(self, groups: Iterator[Sequence[Batch]]) -> Iterator[tuple[torch.Tensor, torch.Tensor, int]]:
        k, max_norm = len(self.plain), self.config.max_grad_norm
        for group in groups:
            inputs = _stack_padded([self.data.batch(b) for b in group])
            labels = torch.stack([self._labels(b) for b in group])
            logits = self.forward(self.params, self.buffers, inputs)
            losses = F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), reduction="none")
            losses = losses.view(k, -1).mean(1)  # each replica's own batch-mean CE
            self.optimizer.zero_grad(set_to_none=True)
            losses.sum().backward()  # replica r's parameters get exactly the gradient of its own loss
            clipped = (
                _clip_each(self.params, max_norm)
                if max_norm is not None
                else torch.zeros(k, dtype=torch.long, device=self.device)
            )
            self.optimizer.step()
            yield losses.detach(), clipped, labels.shape[1]

    def _labels(self, batch: Batch) -> torch.Tensor:
        """A batch's labels on the device: carried by a streamed batch, looked up for a held one."""
        if batch.labels is not None:
            return batch.labels.to(self.device)
        return self.targets[batch.indices.to(self.device, torch.long)]

    def models(self) -> list[nn.Module]:
        """Model r with replica r's slice of the stacked parameters and buffers."""
        with torch.no_grad():
            for r, model in enumerate(self.plain):
                stacked = {**self.params, **self.buffers}
                # a non-persistent buffer (text-linear's idf, from the input all replicas share) is no weight
                model.load_state_dict({n: stacked[n][r] for n in model.state_dict()})
        return list(self.plain)

    def optimizer_states(self) -> list[dict[str, Any]]:
        return _split_optimizer_state(self.optimizer.state_dict(), len(self.plain))


def _stack_padded(inputs: Sequence[torch.Tensor]) -> torch.Tensor:
    """The replicas' batches stacked; token-id batches (2-D) right-padded with 0 to the longest."""
    if inputs[0].dim() == 2:
        longest = max(x.shape[1] for x in inputs)
        inputs = [F.pad(x, (0, longest - x.shape[1])) for x in inputs]
    return torch.stack(list(inputs))


def _clip_each(params: dict[str, torch.Tensor], max_norm: float) -> torch.Tensor:
    """clip_grad_norm_ for each replica separately: replica r's gradients scaled by
    min(1, max_norm / (‖g_r‖ + 1e-6)); returns 1 where a replica was clipped."""
    grads = [p.grad for p in params.values() if p.grad is not None]
    norms = torch.stack([g.flatten(1).pow(2).sum(1) for g in grads]).sum(0).sqrt()
    scale = (max_norm / (norms + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(scale.view(-1, *([1] * (g.dim() - 1))))
    return (norms > max_norm).long()


def _split_optimizer_state(state: dict[str, Any], k: int) -> list[dict[str, Any]]:
    """SGD's state of the stacked parameters as k states of one model each (what `OneModel` restores)."""
    return [
        {
            "state": {
                i: {
                    key: (value[r].clone() if torch.is_tensor(value) and value.dim() > 0 else value)
                    for key, value in slot.items()
                }
                for i, slot in state["state"].items()
            },
            "param_groups": copy.deepcopy(state["param_groups"]),
        }
        for r in range(k)
    ]


def _stacked_optimizer_state(states: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The inverse of `_split_optimizer_state`: k one-model SGD states as the stacked model's."""
    first = states[0]
    stacked = {
        i: {
            key: (
                torch.stack([s["state"][i][key] for s in states])
                if torch.is_tensor(value) and value.dim() > 0
                else value
            )
            for key, value in slot.items()
        }
        for i, slot in first["state"].items()
    }
    return {"state": stacked, "param_groups": copy.deepcopy(first["param_groups"])}
