"""`congruent tune SPEC.yaml`: a Ray Tune search over ELODI's α, K (and λ, T, lr).

The replicas are trained once before the search (or reused from an earlier run with the same data,
architecture and training settings) and served by one shared teacher pool, reserved in its own
placement group; each trial is a distillation run that reserves only the student's resources. Each
trial becomes a child MLflow run; the search ends with the ER / NFR table, the ER–NFR Pareto front,
a scatter plot, and the pick: the lowest NFR among trials whose ER ≤ no-treatment ER + tolerance.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from orchestrator.progress import StageWatch
from pipelines.spec import TuneSpec, UpdateSpec


def search_space(tune_spec: TuneSpec) -> dict[str, Any]:
    """Ray Tune's own search space objects for the spec's `tune.space`."""
    from ray import tune

    space = {}
    for name, values in tune_spec.space.items():
        if isinstance(values, list):
            values = [int(v) for v in values] if name == "k" else values
            space[name] = tune.grid_search(values) if tune_spec.search == "grid" else tune.choice(values)
        else:
            space[name] = (tune.loguniform if values.log else tune.uniform)(values.low, values.high)
    return space


def trial_spec(spec: UpdateSpec, config: dict[str, Any]) -> UpdateSpec:
    """The spec with one trial's settings in place (method fields, and lr in train)."""
    method = spec.method.model_copy(update={k: config[k] for k in config if k != "lr"})
    train = spec.train.model_copy(update={"lr": config["lr"]}) if "lr" in config else spec.train
    return spec.model_copy(update={"method": method, "train": train})


def run_trial(config: dict[str, Any], spec_json: str, actors: list, old_eval_logits: np.ndarray) -> None:
    """One Tune trial, in a Tune worker: distil a student from the shared pool, score it on the
    regression-eval split against the old model, report per-epoch and final metrics."""
    from ray import tune

    from orchestrator.pipeline import data_request, distillation_job, pool_topk
    from workers.checkpoints import load_model
    from workers.inference import predict_logits
    from workers.metrics import update_report
    from workers.stages import cached_splits, train_job
    from workers.teachers import TeacherPool, fetch_checkpoint

    spec = trial_spec(UpdateSpec.model_validate_json(spec_json), config)
    trial_id = tune.get_context().get_trial_id()
    request = data_request(spec)
    job = distillation_job(spec, request, f"tune/{trial_id}.pt")
    objective = job.objective
    pool = TeacherPool(actors, objective.references, pool_topk(objective, cached_splits(request).num_classes))
    record = train_job(job, pool, on_epoch=lambda s: tune.report({"epoch": s.epoch, "val_error_rate": s.val_error_rate}))
    model, _ = load_model(fetch_checkpoint(record["checkpoint"]))
    data = cached_splits(request).eval
    report = update_report(old_eval_logits, predict_logits(model, data).numpy(), data.labels.numpy())
    tune.report({**report, "epoch": len(record["history"]), "val_error_rate": record["val_error_rate"],
                 "steps": record["steps"], "checkpoint": record["checkpoint"], "seconds": record["seconds"]})


def tune_stages(spec: UpdateSpec, run_dir: Path, watch: StageWatch) -> dict[str, Any]:
    """Replicas once, a shared pool, the Tune search; returns the search record (no MLflow here)."""
    import ray
    from ray import tune
    from ray.util.placement_group import remove_placement_group

    from orchestrator.pipeline import check_resources, data_request, prepare, reserve_distillation, \
        start_teacher_pool, train_replicas
    from workers.checkpoints import load_model
    from workers.inference import predict_logits
    from workers.metrics import error_rate, negative_flip_rate, update_report
    from workers.selection import pareto_front, pick_trial
    from workers.teachers import TeacherPool, fetch_checkpoint

    splits, _ = prepare(spec)
    check_resources(spec)
    request = data_request(spec)
    watch.say(f"training {spec.method.m} replicas of {spec.arch} once for every trial")
    started = time.perf_counter()
    replicas = train_replicas(spec, request, watch)
    replicas_seconds = time.perf_counter() - started
    labels = splits.eval.labels.numpy()
    old_logits = predict_logits(load_model(fetch_checkpoint(spec.old))[0], splits.eval).numpy()
    replica_logits = [predict_logits(load_model(fetch_checkpoint(r["checkpoint"]))[0], splits.eval) for r in replicas]
    replica_ers = [error_rate(logits, labels) for logits in replica_logits]
    replica_nfrs = [negative_flip_rate(old_logits, logits, labels) for logits in replica_logits]
    groups = {"teacher": [r["checkpoint"] for r in replicas], "old": [spec.old]}
    group = reserve_distillation(spec, with_student=False)
    actors = start_teacher_pool(spec, groups, group, first=0)
    try:
        paragon = TeacherPool(actors, ("teacher",)).predict(splits.eval, "teacher").numpy()
        res = spec.resources.student
        trainable = tune.with_resources(
            tune.with_parameters(run_trial, spec_json=spec.model_dump_json(), actors=actors,
                                 old_eval_logits=old_logits),
            {"cpu": res.cpus, "gpu": res.gpus},
        )
        scheduler = None
        if spec.tune.scheduler == "asha":
            scheduler = tune.schedulers.ASHAScheduler(time_attr="epoch", max_t=spec.train.epochs, grace_period=1)
        watch.say(f"searching {', '.join(spec.tune.space)} ({spec.tune.search}, {spec.tune.scheduler})")
        tuner = tune.Tuner(
            trainable, param_space=search_space(spec.tune),
            tune_config=tune.TuneConfig(num_samples=spec.tune.num_samples, scheduler=scheduler,
                                        metric="val_error_rate", mode="min"),
            run_config=tune.RunConfig(name="search", storage_path=str((run_dir / "tune").resolve()), verbose=0),
        )
        started = time.perf_counter()
        results = tuner.fit()
        search_seconds = time.perf_counter() - started
        served = sum(i["batches_served"] for i in ray.get([a.info.remote() for a in actors]))
    finally:
        for actor in actors:
            ray.kill(actor)
        remove_placement_group(group)
    trials = []
    for result in results:
        if result.error is not None or "nfr" not in result.metrics:
            raise RuntimeError(f"trial {result.metrics.get('trial_id', '?')} failed: {result.error}")
        m = result.metrics
        trials.append({"trial_id": m["trial_id"], "config": result.config, "error_rate": m["er_new"],
                       "nfr": m["nfr"], "pfr": m["pfr"], "rel_nfr": m["rel_nfr"], "steps": m["steps"],
                       "checkpoint": m["checkpoint"], "seconds": m["seconds"]})
    trials.sort(key=lambda t: t["trial_id"])
    reference = float(np.mean(replica_ers))
    pick = pick_trial(trials, reference, spec.tune.er_tolerance)
    return {
        "trials": trials, "pareto_front": pareto_front(trials), "pick": pick,
        "no_treatment_error_rate": reference, "replica_error_rates": replica_ers, "replica_nfrs": replica_nfrs,
        "replicas": replicas, "replicas_seconds": replicas_seconds, "search_seconds": search_seconds,
        "paragon": update_report(old_logits, paragon, labels), "old_error_rate": error_rate(old_logits, labels),
        "teacher_batches_served": served, "paragon_logits": paragon,
    }
