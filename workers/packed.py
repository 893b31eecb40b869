"""Several replicas of one architecture trained in one process as one batched model.

Processes that share a GPU are time-sliced: m replicas as m processes run about as fast as one.
Here the m models' parameters and buffers are stacked (`torch.func.stack_module_state`) and one
`vmap(functional_call)` runs all of them in each kernel: replica r still has its own seed
(initialisation, data order, augmentation draws), its own loss, gradient-norm clip and momentum, and
its own checkpoint in the format `workers.trainer.train` writes and resumes from — so a packed
replica is interchangeable with one trained alone (same seed, same batches; equal up to float
summation order).

    records = train_packed([job_1, job_2, job_3, job_4])   # replicas: plain CE, same data and config

BatchNorm's running statistics update inside vmap because the buffers are stacked too.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, stack_module_state, vmap

from workers.checkpoints import read_checkpoint, save_checkpoint
from workers.data import batch_inputs
from workers.inference import predict_logits
from workers.metrics import error_rate
from workers.progress import ProgressEvent
from workers.stages import Bookkeeping, TrainJob, TrainRecord, cached_splits, settings_of, train_job, val_reference
from workers.trainer import (
    SYNC_EVERY, EpochStats, NonFiniteLossError, TrainResult, _schedule, batches, classes_seen, scoped_nfr,
)


def _packable(jobs: Sequence[TrainJob]) -> None:
    first = jobs[0]
    for job in jobs:
        if job.objective.references or job.init_from or job.teachers:
            raise ValueError(f"{job.name}: only plain replicas (no references, no start weights) train packed")
        if (job.data, job.arch, replace(job.config, seed=0)) != (first.data, first.arch, replace(first.config, seed=0)):
            raise ValueError(f"{job.name}: packed replicas share data, architecture and settings but the seed")


def _epoch_of(job: TrainJob, local: str) -> int:
    return int(read_checkpoint(local)["epoch"]) if Path(local).exists() else 0


def train_packed(jobs: Sequence[TrainJob], send_progress: Callable[[ProgressEvent], object] | None = None
                 ) -> list[TrainRecord]:
    """Train `jobs` (replicas: same data, architecture and settings, their own seeds) as one
    batched model; finished checkpoints are reused, the others resume from their common epoch (or,
    should they differ after a crash, train one after another). Records in the jobs' order."""
    _packable(jobs)
    started = time.perf_counter()
    torch.set_num_threads(jobs[0].config.threads)
    books = [Bookkeeping.of(job, send_progress=send_progress) for job in jobs]
    epochs = [_epoch_of(job, b.local) for job, b in zip(jobs, books)]
    todo = [i for i, epoch in enumerate(epochs) if epoch < jobs[i].config.epochs]
    records: dict[int, TrainRecord] = {}
    if len({epochs[i] for i in todo}) > 1:  # a crash between two replicas' checkpoint writes
        return [train_job(job, send_progress=send_progress) for job in jobs]
    if len(todo) > 1:
        try:
            results = _train_together([jobs[i] for i in todo], [books[i] for i in todo])
        finally:
            for b in books:
                b.drop_local_copy()
        records = {i: books[i].record(result, started) for i, result in zip(todo, results)}
    return [records[i] if i in records else train_job(job, send_progress=send_progress)
            for i, job in enumerate(jobs)]


def _train_together(jobs: Sequence[TrainJob], books: Sequence[Bookkeeping]) -> list[TrainResult]:
    config, k = jobs[0].config, len(jobs)
    splits = cached_splits(jobs[0].data)
    settings = settings_of(jobs[0])
    device = torch.device(config.device)
    models = [settings.build(job.config.seed, job.allow_user_factories) for job in jobs]
    results = [TrainResult(model) for model in models]
    steps_per_epoch = math.ceil(len(splits.train) / config.batch_size)
    states = [read_checkpoint(b.local) if Path(b.local).exists() else None for b in books]
    for model, state, result in zip(models, states, results):
        if state is not None:
            model.load_state_dict(state["state_dict"])
            result.steps, result.resumed_from = state["epoch"] * steps_per_epoch, state["epoch"]
            result.history = [EpochStats(**h) for h in state["history"]]
    for model in models:
        model.to(device).train()
    params, buffers = stack_module_state(models)
    skeleton = copy.deepcopy(models[0]).to("meta")
    forward = vmap(lambda p, b, x: functional_call(skeleton, (p, b), (x,)))
    optimizer = torch.optim.SGD(params.values(), lr=config.lr, momentum=config.momentum,
                                weight_decay=config.weight_decay, nesterov=True)
    scheduler = _schedule(optimizer, config, steps_per_epoch)
    if states[0] is not None:
        optimizer.load_state_dict(_stacked_optimizer_state([s["optimizer"] for s in states]))
        scheduler.load_state_dict(states[0]["scheduler"])
    images, targets = splits.train.images.to(device), splits.train.labels.to(device)
    references = [val_reference(job) for job in jobs]
    seen = classes_seen(splits.train)
    for epoch in range(results[0].resumed_from, config.epochs):
        began, seen = time.perf_counter(), 0
        loss_sum = torch.zeros(k, device=device)
        clipped = torch.zeros(k, dtype=torch.long, device=device)
        first_bad = torch.zeros((), dtype=torch.long, device=device)
        plans = [batches(splits.train, job.config, epoch) for job in jobs]
        for step, group in enumerate(zip(*plans), 1):
            inputs = torch.stack([batch_inputs(images, b) for b in group])
            labels = torch.stack([targets[b.indices.to(device, torch.long)] for b in group])
            logits = forward(params, buffers, inputs)  # fp32: vmap'd BatchNorm has no bf16 autocast backward
            losses = F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), reduction="none")
            losses = losses.view(k, -1).mean(1)  # each replica's own batch-mean CE
            for result in results:
                result.steps += 1
                result.steps_run += 1
            first_bad = torch.where((first_bad == 0) & ~torch.isfinite(losses).all(), results[0].steps, first_bad)
            optimizer.zero_grad(set_to_none=True)
            losses.sum().backward()  # replica r's parameters get exactly the gradient of its own loss
            if config.max_grad_norm is not None:
                clipped += _clip_each(params, config.max_grad_norm)
            optimizer.step()
            scheduler.step()
            loss_sum += losses.detach() * labels.shape[1]
            seen += labels.shape[1]
            if (step % SYNC_EVERY == 0 or step == steps_per_epoch) and int(first_bad.item()):
                raise NonFiniteLossError(int(first_bad.item()), epoch, float("nan"))
            for b in books:
                b.step(epoch + 1, step, steps_per_epoch)
        seconds = time.perf_counter() - began
        _unstack_into(models, params, buffers)
        optimizer_states = _split_optimizer_state(optimizer.state_dict(), k)
        for r, (job, model, result, b) in enumerate(zip(jobs, models, results, books)):
            stats = EpochStats(epoch=epoch + 1, loss=loss_sum[r].item() / seen, lr=optimizer.param_groups[0]["lr"],
                               seconds=seconds, samples_per_second=seen / seconds,
                               clipped_fraction=clipped[r].item() / steps_per_epoch)
            val_logits = predict_logits(model, splits.val, config.eval_batch_size, device)
            stats.val_error_rate = error_rate(val_logits, splits.val.labels)
            stats.val_nfr = scoped_nfr(references[r], val_logits, splits.val.labels)
            model.train()
            result.history.append(stats)
            result.epochs_run += 1
            save_checkpoint(b.local, model, settings, classes_seen=seen, optimizer=optimizer_states[r],
                            scheduler=scheduler.state_dict(),
                            epoch=epoch + 1, steps=result.steps, history=[asdict(h) for h in result.history],
                            config=asdict(job.config))
            b.epoch_end(stats)
    return results


def _clip_each(params: dict[str, torch.Tensor], max_norm: float) -> torch.Tensor:
    """clip_grad_norm_ for each replica separately: replica r's gradients scaled by
    min(1, max_norm / (‖g_r‖ + 1e-6)); returns 1 where a replica was clipped."""
    grads = [p.grad for p in params.values() if p.grad is not None]
    norms = torch.stack([g.flatten(1).pow(2).sum(1) for g in grads]).sum(0).sqrt()
    scale = (max_norm / (norms + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(scale.view(-1, *([1] * (g.dim() - 1))))
    return (norms > max_norm).long()


def _unstack_into(models: Sequence[nn.Module], params: dict, buffers: dict) -> None:
    """Copy replica r's slice of the stacked parameters and buffers into models[r]."""
    with torch.no_grad():
        for r, model in enumerate(models):
            model.load_state_dict({**{n: p[r] for n, p in params.items()}, **{n: b[r] for n, b in buffers.items()}})


def _split_optimizer_state(state: dict, k: int) -> list[dict]:
    """SGD's state of the stacked parameters as k states of one model each (what `train` resumes)."""
    return [{"state": {i: {key: (value[r].clone() if torch.is_tensor(value) and value.dim() > 0 else value)
                           for key, value in slot.items()} for i, slot in state["state"].items()},
             "param_groups": copy.deepcopy(state["param_groups"])} for r in range(k)]


def _stacked_optimizer_state(states: Sequence[dict]) -> dict:
    """The inverse of `_split_optimizer_state`: k one-model SGD states as the stacked model's."""
    first = states[0]
    stacked = {i: {key: (torch.stack([s["state"][i][key] for s in states]) if torch.is_tensor(value) and value.dim() > 0
                         else value) for key, value in slot.items()} for i, slot in first["state"].items()}
    return {"state": stacked, "param_groups": copy.deepcopy(first["param_groups"])}
