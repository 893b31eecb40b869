"""Running the plan: on Ray (one task per model, two at once on two cores, in submission order), or
in this process (`run_plan_local`: a bare GPU machine, no Ray; consecutive replicas of a version
trained together as one batched model, workers/training/packed.py).

Each job trains (or, for BCWI, interpolates) one model with the project's `train_job`, then saves
its logits on the eval and val splits next to the checkpoint. A job whose record file exists
returns it without work, and `train_job` resumes a partial checkpoint: a rerun picks up where the
last one stopped. On Ray, dependencies (a student needs its teachers and the old model) are object
refs, so a task starts as soon as the models it needs exist; locally the plan's order suffices.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.fidelity.trainings import Planned, Planner
from workers.metrics import error_rate
from workers.models.checkpoints import load_model, save_checkpoint
from workers.models.predict import predict_logits
from workers.runtime import use_threads
from workers.tasks.bodies import train_job
from workers.tasks.resolve import cached_splits
from workers.training.bcwi import select_bcwi

BCWI_ALPHAS = tuple(round(0.1 * i, 1) for i in range(11))


def _save_logits(model: torch.nn.Module, planned: Planned, device: str) -> dict[str, float]:
    """Write `<stem>.eval.npy` and `<stem>.val.npy` (text read through the model's own tokenizer);
    return the val and eval error rates."""
    splits = cached_splits(planned.job.data)
    errors = {}
    for split in ("eval", "val"):
        data = getattr(splits, split)
        logits = predict_logits(model, data, device=device, inputs=planned.job.inputs).numpy().astype(np.float32)
        np.save(f"{planned.stem}.{split}.npy", logits)
        errors[f"{split}_error_rate"] = error_rate(logits, data.labels)
    return errors


def _train(planned: Planned, paths: dict[str, tuple[str, ...]]) -> dict[str, Any]:
    """Train the job with its references in this process (`workers.tasks.resolve.local_teachers`: each group
    on the job's device and precision, text read through the group's own tokenizer)."""
    device = planned.job.config.device
    record = train_job(replace(planned.job, teachers=tuple(paths.items())))
    model, _ = load_model(planned.job.checkpoint_uri)
    return {**asdict(record), **_save_logits(model.to(device), planned, device)}


def _bcwi(planned: Planned, paths: dict[str, tuple[str, ...]], tolerance: float) -> dict[str, Any]:
    """θ = α·θ_old + (1−α)·θ_finetuned, α = the lowest val NFR among α with val ER ≤ ER(α=0) + tolerance."""
    started = time.perf_counter()
    device = planned.job.config.device
    old, settings = load_model(paths["old"][0])
    tuned, _ = load_model(paths["new"][0])
    val = cached_splits(planned.job.data).val
    choice = select_bcwi(old, tuned, val, BCWI_ALPHAS, tolerance, device, settings.inputs)
    tuned.load_state_dict(choice.state_dict)
    save_checkpoint(f"{planned.stem}.pt", tuned, settings, bcwi_alpha=choice.alpha)
    return {
        "name": planned.name,
        "alpha": choice.alpha,
        "sweep": choice.sweep,
        "held_out": choice.held_out,
        "epochs_run": 0,
        "seconds": time.perf_counter() - started,
        **_save_logits(tuned, planned, device),
    }


def run_one(planned: Planned, paths: dict[str, tuple[str, ...]], bcwi_tolerance: float, *upstream: Any) -> dict:
    """Ray task body: the record of one model (cached in `<stem>.json`). `upstream`: the records of
    the models it needs, passed only so that Ray starts it after them."""
    record_path = Path(f"{planned.stem}.json")
    if record_path.exists():
        return {**json.loads(record_path.read_text()), "cached": True}
    use_threads(planned.job.config.threads)
    record = _bcwi(planned, paths, bcwi_tolerance) if planned.kind == "bcwi" else _train(planned, paths)
    record_path.write_text(json.dumps(record))
    return {**record, "cached": False}


def start_local_ray(cpus: int) -> None:
    """A local Ray of `cpus` CPUs for run_plan, its workers at normal priority (Ray's default niceness 15
    starves the trainings on a shared machine) and importing this checkout."""
    import logging
    import os

    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_worker_niceness", "0")
    ray.init(
        address="local",
        num_cpus=cpus,
        include_dashboard=False,
        logging_level=logging.ERROR,
        runtime_env={"env_vars": {"PYTHONPATH": os.environ.get("PYTHONPATH", os.getcwd())}},
    )


def run_plan(plan: Planner, say: Callable[[str], None] = print) -> dict[str, dict]:
    """Submit every planned job in order as a one-CPU Ray task (Ray must be initialised); print each
    as it finishes; return name → record."""
    import ray

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
        how = (
            "cached"
            if record["cached"]
            else f"{record['seconds']:.0f} s, val ER {100 * record['val_error_rate']:.2f} %"
        )
        say(f"[{time.perf_counter() - started:6.0f} s] {len(records)}/{len(refs)} {names[done[0]]} ({how})")
    return records


def _packable(planned: Planned) -> bool:
    return planned.kind == "train" and not planned.references and planned.init_from is None


def _run_pack(pack: list[Planned]) -> list[dict[str, Any]]:
    """Replicas of one version (same data and settings, own seeds) as one batched model; cached
    ones are returned as they are."""
    from workers.tasks.bodies import train_pack

    trained: dict[str, dict[str, Any]] = {}
    todo = [p for p in pack if not Path(f"{p.stem}.json").exists()]
    if len(todo) > 1:
        started = time.perf_counter()
        # packed replicas train fp32 (workers/training/packed.py); the record says so
        jobs = [replace(p.job, config=replace(p.job.config, precision="fp32")) for p in todo]
        for planned, record in zip(todo, train_pack(jobs)):
            model, _ = load_model(planned.job.checkpoint_uri)
            device = planned.job.config.device
            saved = {
                **asdict(record),
                **_save_logits(model.to(device), planned, device),
                "seconds": time.perf_counter() - started,
                "packed": len(todo),
            }
            Path(f"{planned.stem}.json").write_text(json.dumps(saved))
            trained[planned.name] = {**saved, "cached": False}
    return [trained.get(p.name) or run_one(p, {}, 0.0) for p in pack]


def run_plan_local(
    plan: Planner, say: Callable[[str], None] = print, deadline_s: float | None = None
) -> dict[str, dict]:
    """Every planned job in this process, in the plan's order (teachers before their students);
    up to `mode.pack` consecutive replicas of one version trained together. No Ray needed. Past
    `deadline_s` seconds no new job starts (the cache keeps what finished; a rerun continues)."""
    plan.folder.mkdir(parents=True, exist_ok=True)
    jobs, records, started = list(plan.jobs.values()), {}, time.perf_counter()
    index = 0
    while index < len(jobs):
        if deadline_s is not None and time.perf_counter() - started > deadline_s:
            cached = [p for p in jobs[index:] if Path(f"{p.stem}.json").exists()]
            for planned in cached:
                records[planned.name] = run_one(planned, {}, 0.0)
            say(f"deadline of {deadline_s:.0f} s: {len(jobs) - index - len(cached)} of {len(jobs)} models not trained")
            break
        group = [jobs[index]]
        while (
            _packable(group[0])
            and index + len(group) < len(jobs)
            and len(group) < plan.mode.pack
            and _packable(jobs[index + len(group)])
            and jobs[index + len(group)].job.data == group[0].job.data
        ):
            group.append(jobs[index + len(group)])
        if len(group) > 1:
            done = _run_pack(group)
        else:
            planned = group[0]
            paths = {ref: tuple(f"{plan.jobs[n].stem}.pt" for n in names) for ref, names in planned.references}
            done = [run_one(planned, paths, plan.mode.bcwi_tolerance)]
        for planned, record in zip(group, done):
            records[planned.name] = record
            how = (
                "cached"
                if record["cached"]
                else f"{record['seconds']:.0f} s, val ER {100 * record['val_error_rate']:.2f} %"
            )
            say(f"[{time.perf_counter() - started:6.0f} s] {len(records)}/{len(jobs)} {planned.name} ({how})")
        index += len(group)
    return records


def load_logits(plan: Planner, split: str) -> dict[str, np.ndarray]:
    """name → N×C logits of every planned model on `split` (eval | val) that has been trained."""
    return {
        name: np.load(f"{planned.stem}.{split}.npy")
        for name, planned in plan.jobs.items()
        if Path(f"{planned.stem}.{split}.npy").exists()
    }
