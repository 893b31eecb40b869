"""The Tune search over ELODI's α, K (and λ, T, lr): the replicas once, one shared teacher pool,
each trial a distillation that reserves only the student's resources.

    replicas (Ray tasks) → teacher pool (its own placement group) → Tuner.fit (one trial per config,
    distilled from the pool, scored on the regression-eval split) → table, Pareto front, pick

The pick, on the validation split: the lowest val NFR among trials whose val ER ≤ the no-treatment
val ER (the replicas' mean) + the spec's `er_tolerance`; trials the ASHA scheduler stopped early are
not candidates. The eval split's scores are shown, never chosen on: the promotion gate tests the
pick there, and a pick made on it would pass on its luck (the winner's curse). `run_search` tracks
the search as one MLflow run with a child run per trial. Each search writes its trials' checkpoints
in a folder of its own (`STORAGE/MODEL/VERSION/tmp/tune-SEARCH_ID/`, runs.temporary_root); Ctrl-C
has Tune stop every trial, then deletes that folder and raises KeyboardInterrupt.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import numpy as np
from ray import tune

from orchestrator.execution.evaluation import eval_split_predictions, evaluate
from orchestrator.execution.old_answers import old_answers_stage
from orchestrator.execution.pool import serving_pool
from orchestrator.execution.stages import train_replicas
from orchestrator.execution.tune_stop import StopOnCtrlC, fit_until_ctrl_c
from orchestrator.execution.watch import StageWatch
from orchestrator.planning.plan import Plan, applied_params, pool_topk
from orchestrator.tracking import runs
from orchestrator.tracking.tags import FINGERPRINT, TUNE_PICK
from orchestrator.views import plots
from pipelines.spec import TuneSpec, UpdateSpec
from workers import storage
from workers.metrics import UpdateReport, error_rate, negative_flip_rate, update_report
from workers.tasks.records import TrainRecord
from workers.trial_choice import Scored, pareto_front, pick_trial


def search_space(tune_spec: TuneSpec) -> dict[str, Any]:
    """Ray Tune's own search space objects for the spec's `tune.space`."""
    space: dict[str, Any] = {}
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


def run_trial(
    config: dict[str, Any],
    plan: Plan,
    actors: list | None,
    groups: dict[str, list[str]],
    old_eval_predictions: np.ndarray,
    trials_uri: str,
    train_split: Any = None,
    samples: int | None = None,
) -> None:
    """One Tune trial, in a Tune worker: distil a student from the shared pool (or, without actors,
    from its teachers in its own process) into `trials_uri`/TRIAL_ID.pt, score it on the
    regression-eval split against the old model's class ids, report per-epoch and final metrics."""
    from orchestrator.execution.pool import TeacherPool
    from workers.runtime import stop_quietly
    from workers.tasks.bodies import eval_predictions, train_job

    stop_quietly()  # Tune stops trials with SIGTERM (Ctrl-C, ASHA): no traceback on the user's terminal
    spec = trial_spec(plan.spec, config)
    job = plan.student_job(spec=spec, teachers=None if actors else groups)
    job = dataclasses.replace(job, checkpoint_uri=storage.join(trials_uri, f"{tune.get_context().get_trial_id()}.pt"))
    pool = None
    if actors:
        topk = pool_topk(job.objective, plan.splits.num_classes)
        pool = TeacherPool(actors, job.objective.references, train_split[0], topk, samples=samples)
    record = train_job(
        job, pool, on_epoch=lambda s: tune.report({"epoch": s.epoch, "val_error_rate": s.val_error_rate})
    )
    labels = plan.splits.eval_labels
    new = eval_predictions({"new": record.checkpoint}, plan.data, job.config.device, spec.allow_user_factories)["new"]
    tune.report(
        {
            **update_report(old_eval_predictions, new, labels),
            "epoch": len(record.history),
            "val_error_rate": record.val_error_rate,
            "val_nfr": record.history[-1]["val_nfr"] if record.history else None,
            "steps": record.steps,
            "checkpoint": record.checkpoint,
            "seconds": record.seconds,
        }
    )


class TrialResult(TypedDict):
    """One finished trial: its settings, its scores against the old model on the validation split
    (chosen on) and on the regression-eval split (shown), its training and checkpoint."""

    trial_id: str
    config: dict[str, Any]
    val_error_rate: float
    val_nfr: float
    error_rate: float
    nfr: float
    pfr: float
    rel_nfr: float | None
    steps: int
    checkpoint: str
    seconds: float


@dataclass
class SearchRecord:
    """Everything the search found (tune.json)."""

    trials: list[TrialResult]
    pareto_front: list[int]
    pick: int | None  # chosen on the validation split (`choose`)
    no_treatment_val_error_rate: float  # the replicas' mean: the ER a pick must stay near
    no_treatment_error_rate: float
    replica_error_rates: list[float]
    replica_nfrs: list[float]
    replicas: list[TrainRecord]
    replicas_seconds: float
    search_seconds: float
    paragon: UpdateReport
    old_error_rate: float
    teacher_batches_served: int
    stopped_early: list[str] = field(default_factory=list)  # trial ids the ASHA scheduler stopped
    seconds: float = 0.0

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, default=str)


@dataclass(frozen=True)
class Baseline:
    """The replicas, trained once for every trial, and the old model's, each replica's and their
    paragon's class ids on the regression-eval split."""

    replicas: list[TrainRecord]
    seconds: float
    ids: dict[str, np.ndarray]  # "old", each replica's name, "paragon"


def train_baseline(plan: Plan, watch: StageWatch) -> Baseline:
    """The replicas, then the eval split's predictions of the old model, each replica and their
    paragon φ_ens = (1/m) Σ_i φ^(i) (mean logits)."""
    spec = plan.spec
    assert spec.old is not None  # the validator requires old with a tune section
    watch.say(f"training {spec.method.m} replicas of {spec.arch} once for every trial")
    started = time.perf_counter()
    replicas = train_replicas(plan, watch)
    seconds = time.perf_counter() - started
    checkpoints = {"old": spec.old, **{r.name: r.checkpoint for r in replicas}}
    return Baseline(replicas, seconds, eval_split_predictions(plan, checkpoints, [r.checkpoint for r in replicas]))


def make_tuner(
    plan: Plan, pool: Any, groups: dict[str, list[str]], baseline: Baseline, where: tuple[Path, str], stopper: Any
) -> Any:
    """The Tuner of the search: each trial a student served by the shared `pool`, its results under
    `where` (the run folder, the trials' storage URI), every trial stopped once `stopper` says so."""
    spec, res = plan.spec, plan.spec.resources.student
    assert spec.tune is not None
    run_dir, trials_uri = where
    trainable = tune.with_resources(
        tune.with_parameters(
            run_trial,
            plan=plan,
            actors=pool.actors if pool else None,
            groups=groups,
            old_eval_predictions=baseline.ids["old"],
            trials_uri=trials_uri,
            train_split=[pool.train_split] if pool else None,
            samples=pool.samples if pool else None,
        ),
        {"cpu": res.cpus, "gpu": res.gpus},
    )
    scheduler = None
    if spec.tune.scheduler == "asha":
        # max_t one past the last epoch: ASHA ends a trial whose "epoch" reaches max_t, and a trial's
        # final report (its eval scores) comes after its last epoch's
        scheduler = tune.schedulers.ASHAScheduler(time_attr="epoch", max_t=spec.train.epochs + 1, grace_period=1)
    return tune.Tuner(
        trainable,
        param_space=search_space(spec.tune),
        tune_config=tune.TuneConfig(
            num_samples=spec.tune.num_samples, scheduler=scheduler, metric="val_error_rate", mode="min"
        ),
        run_config=tune.RunConfig(
            name="search", storage_path=str((run_dir / "tune").resolve()), verbose=0, stop=stopper
        ),
    )


def run_trials(plan: Plan, run_dir: Path, watch: StageWatch, baseline: Baseline) -> tuple[Any, float, int]:
    """The Tune search beside one teacher pool serving the replicas and the old model: Tune's
    results, the search's seconds, the batches the pool served. KeyboardInterrupt, with nothing of
    the search kept, on Ctrl-C."""
    spec = plan.spec
    assert spec.tune is not None and spec.old is not None
    groups = {"teacher": [r.checkpoint for r in baseline.replicas], "old": [spec.old]}
    with serving_pool(plan, groups, with_student=False) as pool:
        trials_uri = storage.join(runs.temporary_root(spec), f"tune-{uuid.uuid4().hex[:12]}")
        runs.record_temporary(trials_uri)  # until the search ends: a killed driver's rerun deletes it
        stopper = StopOnCtrlC()
        tuner = make_tuner(plan, pool, groups, baseline, (run_dir, trials_uri), stopper)
        watch.say(f"searching {', '.join(spec.tune.space)} ({spec.tune.search}, {spec.tune.scheduler})")
        pressed = stopper.pressed
        started = time.perf_counter()
        try:
            results = fit_until_ctrl_c(tuner, pressed)
        except KeyboardInterrupt:  # the second Ctrl-C: the trials die with this driver
            pressed.set()
        seconds = time.perf_counter() - started
        if pressed.is_set():  # Tune stopped the trials: nothing of this search is kept
            storage.delete_tree(trials_uri)
            raise KeyboardInterrupt
        return results, seconds, pool.batches_served()[1] if pool else 0


def trial_results(results: Any) -> tuple[list[TrialResult], list[str]]:
    """The finished trials, by id, and the ids of those the scheduler stopped early; RuntimeError
    naming a trial that failed."""
    trials: list[TrialResult] = []
    stopped: list[str] = []
    for result in results:
        if result.error is not None:
            raise RuntimeError(f"trial {result.metrics.get('trial_id', '?')} failed: {result.error}")
        m = result.metrics
        if "nfr" not in m:  # terminated without its final report: stopped early by the scheduler
            stopped.append(m["trial_id"])
            continue
        trials.append(
            TrialResult(
                trial_id=m["trial_id"],
                config=result.config,
                val_error_rate=m["val_error_rate"],
                val_nfr=m["val_nfr"],
                error_rate=m["er_new"],
                nfr=m["nfr"],
                pfr=m["pfr"],
                rel_nfr=m["rel_nfr"],
                steps=m["steps"],
                checkpoint=m["checkpoint"],
                seconds=m["seconds"],
            )
        )
    return sorted(trials, key=lambda t: t["trial_id"]), sorted(stopped)


def search(plan: Plan, run_dir: Path, watch: StageWatch) -> SearchRecord:
    """Replicas once, a shared pool, the Tune search (Ray must be initialised)."""
    spec, labels = plan.spec, plan.splits.eval_labels
    assert spec.tune is not None  # the front door checks it (driver/launch.py)
    baseline = train_baseline(plan, watch)
    results, search_seconds, served = run_trials(plan, run_dir, watch, baseline)
    trials, stopped = trial_results(results)
    old_ids, replicas = baseline.ids["old"], baseline.replicas
    replica_ers = [error_rate(baseline.ids[r.name], labels) for r in replicas]
    val_reference = float(np.mean([r.val_error_rate for r in replicas]))
    front, pick = choose(trials, val_reference, spec.tune.er_tolerance)
    return SearchRecord(
        trials=trials,
        pareto_front=front,
        pick=pick,
        no_treatment_val_error_rate=val_reference,
        no_treatment_error_rate=float(np.mean(replica_ers)),
        replica_error_rates=replica_ers,
        replica_nfrs=[negative_flip_rate(old_ids, baseline.ids[r.name], labels) for r in replicas],
        replicas=replicas,
        replicas_seconds=baseline.seconds,
        search_seconds=search_seconds,
        paragon=update_report(old_ids, baseline.ids["paragon"], labels),
        old_error_rate=error_rate(old_ids, labels),
        teacher_batches_served=served,
        stopped_early=stopped,
    )


def choose(trials: list[TrialResult], val_reference: float, tolerance: float) -> tuple[list[int], int | None]:
    """The ER–NFR Pareto front and the pick (workers/trial_choice.py), both on the validation split:
    `val_reference` is the no-treatment val ER. The eval split is never looked at here."""
    on_val = [Scored(error_rate=t["val_error_rate"], nfr=t["val_nfr"]) for t in trials]
    return pareto_front(on_val), pick_trial(on_val, val_reference, tolerance)


def scatter(record: SearchRecord, title: str) -> Any:
    """ER vs NFR of every trial, the Pareto front, the pick, the no-treatment replicas, the paragon."""
    points = [
        plots.Point(t["error_rate"], t["nfr"], "ELODI trials", ", ".join(f"{k}={v:g}" for k, v in t["config"].items()))
        for t in record.trials
    ]
    points += [
        plots.Point(er, nfr, "no treatment (replicas)")
        for er, nfr in zip(record.replica_error_rates, record.replica_nfrs)
    ]
    points.append(
        plots.Point(record.paragon["er_new"], record.paragon["nfr"], f"ensemble paragon (m = {len(record.replicas)})")
    )
    front = [points[i] for i in record.pareto_front]
    pick = points[record.pick] if record.pick is not None else None
    return plots.er_nfr_scatter(
        points, title, front=front, highlight=pick, colours={"no treatment (replicas)": "tab:gray"}
    )


def run_search(plan: Plan, run_dir: Path, watch: StageWatch, register_best: bool) -> tuple[SearchRecord, Any]:
    """The search inside one MLflow run (a child run per replica and per trial), tune.json and the
    scatter `er_nfr.png` in `run_dir`; with `register_best`, the pick evaluated and registered as a
    new version. Returns the record and, when registered, the pick's PipelineResult."""
    from orchestrator.driver.publish import pipeline_result, publish

    spec = plan.spec
    started = time.perf_counter()
    registered = None
    with runs.pipeline_run(spec, f"{spec.version}-tune", watch.say):
        runs.set_tags({FINGERPRINT: plan.splits.eval_fingerprint})
        runs.log_params(applied_params(spec))
        old_answers_stage(plan, watch)
        record = search(plan, run_dir, watch)
        record.seconds = time.perf_counter() - started
        for replica in record.replicas:
            runs.log_training(replica.name, replica)
        for trial in record.trials:
            runs.log_trial(
                f"trial-{trial['trial_id']}",
                trial["config"],
                {
                    k: trial[k]
                    for k in ("val_error_rate", "val_nfr", "error_rate", "nfr", "pfr", "rel_nfr", "steps", "seconds")
                },
            )
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "tune.json").write_text(record.to_json())
        runs.log_file(run_dir / "tune.json")
        runs.log_file(plots.save(scatter(record, f"{spec.model}: ER vs NFR per trial"), run_dir / "er_nfr.png"))
        picked = record.trials[record.pick] if record.pick is not None else None
        runs.set_tags({TUNE_PICK: json.dumps(picked["config"]) if picked else "none"})
        if picked is not None and register_best:
            best = trial_spec(spec, picked["config"])
            evaluation = evaluate(plan, picked["checkpoint"], [r.checkpoint for r in record.replicas], run_dir / "best")
            registered = pipeline_result(plan, evaluation, picked["checkpoint"], None, spec=best)
            publish(plan, registered, run_dir / "best", watch, spec=best)
    return record, registered
