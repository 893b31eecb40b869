"""Running the plan on Ray: one task per model, two at once on two cores, in submission order.

Each task trains (or, for BCWI, interpolates) one model with the project's `train_job`, then saves
its logits on the eval and val splits next to the checkpoint. A task whose record file exists
returns it without work, and `train_job` resumes a partial checkpoint: a rerun picks up where the
last one stopped. Dependencies (a student needs its teachers and the old model) are Ray object refs,
so a task starts as soon as the models it needs exist.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import ray
import torch

from benchmarks.fidelity.plan import Planned, Planner
from workers.bcwi import select_bcwi
from workers.checkpoints import load_model, save_checkpoint
from workers.inference import FrozenModels, LocalReferences, predict_logits
from workers.metrics import error_rate
from workers.stages import cached_splits, train_job

BCWI_ALPHAS = tuple(round(0.1 * i, 1) for i in range(11))


def _save_logits(model: torch.nn.Module, planned: Planned, device: str) -> dict[str, float]:
    """Write `<stem>.eval.npy` and `<stem>.val.npy`; return the val and eval error rates."""
    splits = cached_splits(planned.job.data)
    errors = {}
    for split in ("eval", "val"):
        data = getattr(splits, split)
        logits = predict_logits(model, data, device=device).numpy().astype(np.float32)
        np.save(f"{planned.stem}.{split}.npy", logits)
        errors[f"{split}_error_rate"] = error_rate(logits, data.labels)
    return errors


def _load(paths: tuple[str, ...], device: str) -> FrozenModels:
    return FrozenModels([load_model(path)[0] for path in paths], device)


def _train(planned: Planned, paths: dict[str, tuple[str, ...]]) -> dict[str, Any]:
    device = planned.job.config.device
    references = LocalReferences(**{name: _load(group, device) for name, group in paths.items()}) if paths else None
    record = train_job(planned.job, references)
    model, _ = load_model(planned.job.checkpoint_uri)
    return {**asdict(record), **_save_logits(model.to(device), planned, device)}


def _bcwi(planned: Planned, paths: dict[str, tuple[str, ...]], tolerance: float) -> dict[str, Any]:
    """θ = α·θ_old + (1−α)·θ_finetuned, α = the lowest val NFR among α with val ER ≤ ER(α=0) + tolerance."""
    started = time.perf_counter()
    device = planned.job.config.device
    old, settings = load_model(paths["old"][0])
    tuned, _ = load_model(paths["new"][0])
    choice = select_bcwi(old, tuned, cached_splits(planned.job.data).val, BCWI_ALPHAS, tolerance, device)
    tuned.load_state_dict(choice.state_dict)
    save_checkpoint(f"{planned.stem}.pt", tuned, settings, bcwi_alpha=choice.alpha)
    return {"name": planned.name, "alpha": choice.alpha, "sweep": choice.sweep, "epochs_run": 0,
            "seconds": time.perf_counter() - started, **_save_logits(tuned, planned, device)}


def run_one(planned: Planned, paths: dict[str, tuple[str, ...]], bcwi_tolerance: float, *upstream: Any) -> dict:
    """Ray task body: the record of one model (cached in `<stem>.json`). `upstream`: the records of
    the models it needs, passed only so that Ray starts it after them."""
    record_path = Path(f"{planned.stem}.json")
    if record_path.exists():
        return {**json.loads(record_path.read_text()), "cached": True}
    torch.set_num_threads(planned.job.config.threads)
    record = _bcwi(planned, paths, bcwi_tolerance) if planned.kind == "bcwi" else _train(planned, paths)
    record_path.write_text(json.dumps(record))
    return {**record, "cached": False}


def run_plan(plan: Planner, say: Callable[[str], None] = print) -> dict[str, dict]:
    """Submit every planned job in order as a one-CPU Ray task (Ray must be initialised); print each
    as it finishes; return name → record."""
    plan.folder.mkdir(parents=True, exist_ok=True)
    task = ray.remote(run_one).options(num_cpus=1, num_gpus=plan.mode.gpus_per_task, max_retries=1)
    refs: dict[str, ray.ObjectRef] = {}
    for name, planned in plan.jobs.items():
        paths = {ref: tuple(f"{plan.jobs[n].stem}.pt" for n in group) for ref, group in planned.references}
        refs[name] = task.remote(planned, paths, plan.mode.bcwi_tolerance, *[refs[n] for n in planned.needs])
    names = {ref: name for name, ref in refs.items()}
    records: dict[str, dict] = {}
    started, pending = time.perf_counter(), list(refs.values())
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        record = ray.get(done[0])
        records[names[done[0]]] = record
        how = "cached" if record["cached"] else f"{record['seconds']:.0f} s, val ER {100 * record['val_error_rate']:.2f} %"
        say(f"[{time.perf_counter() - started:6.0f} s] {len(records)}/{len(refs)} {names[done[0]]} ({how})")
    return records


def load_logits(plan: Planner, split: str) -> dict[str, np.ndarray]:
    """name → N×C logits of every planned model on `split` (eval | val)."""
    return {name: np.load(f"{planned.stem}.{split}.npy") for name, planned in plan.jobs.items()}
