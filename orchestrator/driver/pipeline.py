"""One update pipeline, top-down: the stages its method needs, then evaluation and publishing.

plan = preflight(spec)                  # driver: data, old checkpoint, registry (plan.py)
run_pipeline(plan, run_dir, watch)
  replicas   m Ray tasks in parallel    (elodi, ensemble)
  pool       Ray actors serving teacher logits, reserved with the student
  student    one Ray task, distilled online from the pool (or plain CE)
  bcwi       one Ray task: α picked on val (bcwi)
  evaluate   one Ray task streams the logits on the regression-eval split (new, old, paragon) chunk
             by chunk; the driver writes them to files and counts the metrics (evaluation.py)
  publish    MLflow: nested runs, evaluation, ledger, registry version, promotion gate
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from orchestrator.execution.evaluation import evaluate
from orchestrator.execution.pool import serving_pool
from orchestrator.execution.stages import run_bcwi, train_replicas, train_student
from orchestrator.execution.watch import StageWatch
from orchestrator.planning.plan import Plan, adapter_of, applied_params
from orchestrator.tracking import promotion, registry, runs
from orchestrator.tracking.ledger import LEDGER_FILE, write_ledger
from orchestrator.tracking.version_record import VersionRecord
from pipelines.spec import UpdateSpec
from workers.metrics import EvaluationMetrics
from workers.tasks.records import BcwiRecord, TrainRecord


@dataclass
class PoolRecord:
    """What the teacher pool did: its actors (pids after any restart) and the batches they served."""

    actors: int
    pids: list[int]
    batches_served: int  # since each actor's last (re)start
    student_steps: int


@dataclass
class PipelineResult:
    model: str
    version: str
    method: str
    arch: str
    spec_hash: str
    fingerprint: str
    n_eval: int
    checkpoint: str | None  # None for the ensemble paragon (nothing single to deploy)
    old: str | None
    metrics: EvaluationMetrics
    predictions: dict[str, str]
    labels: str
    ids: str = ""  # the eval samples' ids (.npy), in the order of the predictions and labels
    replicas: list[TrainRecord] = field(default_factory=list)
    student: TrainRecord | None = None
    teacher_pool: PoolRecord | None = None
    bcwi: BcwiRecord | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    run_id: str | None = None
    registered_version: str | None = None
    promotion: dict[str, Any] | None = None


def stage_titles(plan: Plan) -> list[str]:
    """The numbered stages the method runs, as the progress lines name them."""
    titles = []
    if plan.needs_replicas:
        titles.append(f"training {plan.spec.method.m} replicas of {plan.spec.arch} in parallel")
    if plan.needs_student:
        titles.append(
            f"distilling the student ({plan.method}) online from {plan.spec.resources.teacher_actors} teacher actors"
            if plan.objective.references
            else f"training the model ({plan.method})"
        )
    titles.append("evaluating on the regression-eval split")
    return [f"stage {i}/{len(titles)}: {title}" for i, title in enumerate(titles, 1)]


def run_pipeline(plan: Plan, run_dir: Path, watch: StageWatch) -> PipelineResult:
    """Every stage the spec's method needs, inside one MLflow run (FAILED with the traceback if a
    stage fails, KILLED on Ctrl-C); registers the model only once its evaluation and ledger are
    stored. Ray must be initialised."""
    spec = plan.spec
    titles = iter(stage_titles(plan))
    seconds: dict[str, float] = {}
    with runs.pipeline_run(spec, say=watch.say) as run_id:
        runs.set_tags({"fingerprint": plan.splits.eval_fingerprint})
        runs.log_params(applied_params(spec))
        log_data_counts(plan)
        replicas: list[TrainRecord] = []
        if plan.needs_replicas:
            watch.say(next(titles))
            started = time.perf_counter()
            replicas = train_replicas(plan, watch)
            seconds["replicas"] = time.perf_counter() - started
        student, pool_record = None, None
        groups = plan.teacher_groups([r.checkpoint for r in replicas])
        # a data-parallel student's workers are reserved by Ray Train, not in the pool's placement group
        data_parallel = plan.needs_student and spec.resources.student.workers > 1
        with serving_pool(
            plan, groups, with_student=plan.needs_student and not data_parallel, spread=data_parallel
        ) as pool:
            if plan.needs_student:
                watch.say(next(titles))
                in_process = groups if pool is None and plan.objective.references else None
                student = train_student(plan, watch, pool, plan.student_job(teachers=in_process))
                seconds["student"] = student.seconds
            if pool is not None:
                pids, served = pool.batches_served()
                pool_record = PoolRecord(len(pool.actors), pids, served, student.steps if student else 0)
        checkpoint, bcwi = (student.checkpoint if student else None), None
        if plan.method == "bcwi" and student is not None:
            bcwi = run_bcwi(plan, student)
            watch.say(_bcwi_line(bcwi))
            checkpoint = bcwi.checkpoint
        watch.say(next(titles))
        evaluation = evaluate(plan, checkpoint, [r.checkpoint for r in replicas], run_dir, watch)
        result = PipelineResult(
            model=spec.model,
            version=spec.version,
            method=plan.method,
            arch=spec.arch,
            spec_hash=spec.spec_hash,
            fingerprint=plan.splits.eval_fingerprint,
            n_eval=evaluation.n_eval,
            checkpoint=checkpoint,
            old=spec.old,
            metrics=evaluation.metrics,
            predictions=evaluation.predictions,
            labels=evaluation.labels,
            ids=evaluation.ids,
            replicas=replicas,
            student=student,
            teacher_pool=pool_record,
            bcwi=bcwi,
            seconds=seconds,
            run_id=run_id,
        )
        publish(plan, result, run_dir, watch)
    return result


def _bcwi_line(bcwi: BcwiRecord) -> str:
    picked = next(row for row in bcwi.sweep if row["alpha"] == bcwi.alpha)
    return (
        f"BCWI: α = {bcwi.alpha} picked on the validation split (val ER {100 * picked['error_rate']:.2f}%, "
        f"val NFR {100 * picked['nfr']:.2f}%)"
    )


def log_data_counts(plan: Plan) -> None:
    """With data.unlabelled, the texts kept and left out (metrics data.unlabelled, data.unlabelled_dropped);
    with data.skip_corrupt, how many files preflight left out (metric data.skipped_corrupt) and which
    (artifact data/skipped_corrupt.txt)."""
    if plan.splits.unlabelled is not None:
        runs.log_metrics(
            "data.", {"unlabelled": plan.splits.unlabelled[0], "unlabelled_dropped": plan.splits.unlabelled[1]}
        )
    data = plan.data
    if not data.skip_corrupt or data.streamed is None:
        return
    skipped = data.streamed.skipped
    runs.log_metrics("data.", {"skipped_corrupt": len(skipped)})
    if skipped:
        runs.log_text("".join(f"{name}\n" for name in skipped), "data/skipped_corrupt.txt")


def version_record(spec: UpdateSpec, plan: Plan, metrics: EvaluationMetrics) -> VersionRecord:
    """What the registry records of a version: lineage, method, eval split, ER and flips against its
    parent, class names. A first version has no `parent_version` and `old`; without an old model
    there are no `nfr` / `pfr` / `rel_nfr` (and no `rel_nfr` where it is undefined)."""
    vs_old = metrics.get("vs_old", {})
    return VersionRecord(
        method=spec.method.name,
        arch=spec.arch,
        label=spec.version,
        fingerprint=plan.splits.eval_fingerprint,
        spec_hash=spec.spec_hash,
        base_digest=plan.start.arch_key or "",
        adapter=adapter.summary if (adapter := adapter_of(spec)) else "",
        error_rate=metrics["error_rate"],
        parent_version=plan.old.parent.version if plan.old.parent else None,
        old=plan.old.written if plan.old.parent else spec.old,  # a registry reference as written, else the path
        nfr=vs_old.get("nfr"),
        pfr=vs_old.get("pfr"),
        rel_nfr=vs_old.get("rel_nfr"),
        n_compared=vs_old.get("n") or None,  # the samples NFR and PFR count: their bounds' n
        nfr_classes=plan.old.classes,
        class_names=plan.splits.class_names,
    )


def publish(
    plan: Plan, result: PipelineResult, run_dir: Path, watch: StageWatch, spec: UpdateSpec | None = None
) -> None:
    """MLflow: nested runs per trained model, the pool's and BCWI's figures, the evaluation with
    the ledger; then the registry version (once per spec) and the promotion gate of `spec.promote`;
    last, result.json in `run_dir` and the run. `spec`: the one registered (a Tune trial's)."""
    spec = spec or plan.spec
    for record in result.replicas:
        runs.log_training(record.name, record)
    if result.student is not None:
        name = "distillation" if plan.objective.references else "training"
        runs.log_training(name, result.student, {"method": spec.method.name})
    if result.teacher_pool is not None:
        batches = (result.student.teacher_batches or {}) if result.student else {}
        runs.log_metrics(
            "teacher_pool.",
            {
                **{k: v for k, v in asdict(result.teacher_pool).items() if k != "pids"},
                **{f"batches_{k}": v for k, v in batches.items()},
            },
        )
    if result.bcwi is not None:
        runs.log_bcwi(result.bcwi.alpha, result.bcwi.sweep)
    runs.log_metrics("seconds.", result.seconds)
    runs.log_evaluation(result.metrics, run_dir / "predictions")
    (run_dir / "ledger").mkdir(exist_ok=True)
    trained = result.bcwi or result.student
    ledger = write_ledger(
        run_dir / "ledger" / LEDGER_FILE,
        np.load(result.predictions["new"], mmap_mode="r"),  # read by the ledger in blocks
        np.load(result.labels),
        np.load(result.ids),
        result.fingerprint,
        trained.classes_seen if trained else None,
    )
    runs.log_file(ledger, "ledger")
    if result.checkpoint is not None:
        version, new = registry.register_once(
            spec.model, result.checkpoint, version_record(spec, plan, result.metrics), spec.allow_user_factories
        )
        watch.say(
            f"registered {spec.model} version {version} (alias challenger)"
            if new
            else f"{spec.model} version {version} already holds spec {spec.spec_hash}: not registered again"
        )
        result.registered_version = version
    if spec.promote is not None and result.registered_version is not None:
        gate = spec.promote
        limits = promotion.GateLimits(gate.max_nfr, gate.max_er_increase, gate.confidence)
        verdict = promotion.promote(spec.model, result.registered_version, limits)
        result.promotion = {"passed": verdict.passed, "reason": verdict.reason}
        runs.set_tags({"promotion": ("champion: " if verdict.passed else "rejected: ") + verdict.reason})
    (run_dir / "result.json").write_text(json.dumps(asdict(result), indent=2))
    runs.log_file(run_dir / "result.json")
