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

import time
from pathlib import Path

from orchestrator.driver.auto import run_auto
from orchestrator.driver.publish import PipelineResult, PoolRecord, log_data_counts, pipeline_result, publish
from orchestrator.execution.evaluation import evaluate
from orchestrator.execution.old_answers import old_answers_stage
from orchestrator.execution.pool import serving_pool
from orchestrator.execution.stages import run_bcwi, train_replicas, train_student
from orchestrator.execution.watch import StageWatch
from orchestrator.planning.plan import Plan, applied_params
from orchestrator.tracking import runs
from orchestrator.tracking.tags import FINGERPRINT
from orchestrator.views.format import bcwi_line
from workers.tasks.records import TrainRecord


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
    stored. Ray must be initialised. Method auto: driver/auto.py."""
    if plan.auto is not None:
        return run_auto(plan, run_dir, watch)
    spec = plan.spec
    titles = iter(stage_titles(plan))
    seconds: dict[str, float] = {}
    with runs.pipeline_run(spec, say=watch.say) as run_id:
        runs.set_tags({FINGERPRINT: plan.splits.eval_fingerprint})
        runs.log_params(applied_params(spec))
        log_data_counts(plan)
        old_answers_stage(plan, watch)
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
            watch.say(bcwi_line(bcwi))
            checkpoint = bcwi.checkpoint
        watch.say(next(titles))
        started = time.perf_counter()
        evaluation = evaluate(plan, checkpoint, [r.checkpoint for r in replicas], run_dir, watch)
        seconds["evaluation"] = time.perf_counter() - started
        result = pipeline_result(
            plan,
            evaluation,
            checkpoint,
            run_id,
            replicas=replicas,
            student=student,
            teacher_pool=pool_record,
            bcwi=bcwi,
            seconds=seconds,
        )
        publish(plan, result, run_dir, watch)
    return result
