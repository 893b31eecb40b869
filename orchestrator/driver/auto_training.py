"""auto's candidates trained as specs naming their methods would train them, a round at a time
(orchestrator/driver/auto.py runs the rounds): the replicas once for the elodi candidates, one teacher
pool for a round's students, each candidate in turn (or side by side with teachers in process),
bcwi's α on val held to auto's limit."""

from __future__ import annotations

import dataclasses
import time

from orchestrator.execution.pool import serving_pool
from orchestrator.execution.stages import run_bcwi, train_replicas, train_student, train_students
from orchestrator.execution.watch import StageWatch
from orchestrator.planning.plan import Plan
from orchestrator.views.format import bcwi_line
from workers.tasks.records import BcwiRecord, TrainRecord
from workers.trial_choice import CandidateScore


@dataclasses.dataclass
class Trained:
    """The candidates' trainings: the replicas (shared by the elodi candidates), each candidate's
    training record, bcwi's sweep, and their scores on val."""

    replicas: list[TrainRecord] = dataclasses.field(default_factory=list)
    records: dict[str, TrainRecord] = dataclasses.field(default_factory=dict)
    bcwi: BcwiRecord | None = None
    scores: list[CandidateScore] = dataclasses.field(default_factory=list)


def training_title(plan: Plan, names: list[str]) -> str:
    """The progress line of one round of candidate trainings."""
    how = "in turn, from the teacher pool" if plan.pool_actors else "side by side, each with its teachers in process"
    return f"auto: training {', '.join(names)} ({how})"


def train_more(plan: Plan, watch: StageWatch, trained: Trained, names: list[str]) -> list[CandidateScore]:
    """Train the candidates `names` (in auto's order; no treatment in the first round) into
    `trained`: the replicas once, when the first elodi candidate comes, one teacher pool for the
    round's students, each training in turn (side by side with teachers in process), bcwi's α on
    val held to auto's limit; returns their scores (val ER and NFR against the old model)."""
    assert plan.auto is not None and plan.spec.old is not None  # auto needs old (the spec's validator)
    by_name = {c.name: c for c in plan.auto.candidates}
    plans = {name: plan.candidate(by_name[name]) for name in names}
    replica_seconds, elodi = 0.0, [name for name in names if name.startswith("elodi")]
    if elodi and not trained.replicas:
        watch.say(f"auto: training {plan.spec.method.m} replicas of {plan.spec.arch} in parallel (for elodi)")
        started = time.perf_counter()
        trained.replicas = train_replicas(plans[elodi[0]], watch)
        replica_seconds = time.perf_counter() - started
    teachers = [r.checkpoint for r in trained.replicas]
    groups = {"old": [plan.spec.old], **({"teacher": teachers} if elodi else {})}
    data_parallel = plan.spec.resources.student.workers > 1
    records: dict[str, TrainRecord] = {}
    with serving_pool(plan, groups, with_student=not data_parallel, spread=data_parallel) as pool:
        watch.say(training_title(plan, names))
        jobs = {}
        for name, candidate in plans.items():
            own = candidate.teacher_groups(teachers if name.startswith("elodi") else [])
            in_process = own if pool is None and candidate.objective.references else None
            jobs[name] = dataclasses.replace(candidate.student_job(teachers=in_process), name=f"candidate-{name}")
        if pool is None and not data_parallel:  # no pool to share: as many at once as the CPUs hold
            records = dict(zip(jobs, train_students(plan, watch, None, list(jobs.values()))))
        for name, job in jobs.items():
            if name not in records:  # one at a time: the pool reserves one student
                records[name] = train_student(plans[name], watch, pool, job)
    trained.records.update(records)
    reference = trained.records["none"].val_error_rate
    scores = []
    for name, record in records.items():
        seconds = record.seconds + (replica_seconds if elodi and name == elodi[0] else 0.0)  # it paid for them
        if name == "bcwi":  # after the pool is gone: its task is not one the pool reserved
            started = time.perf_counter()
            limit = plan.spec.method.max_er_increase
            trained.bcwi = bcwi = run_bcwi(bcwi_held_to(plans[name], reference, limit, record), record)
            watch.say(bcwi_line(bcwi))
            # scored on its cross-fitted val figures: α picked on one half of val, counted on the
            # other (the whole split's figures at the α picked on it flatter it; the other
            # candidates were not picked on val, docs/benchmarks/quality.md "Reading the held-out auto runs")
            assert bcwi.held_out is not None
            seconds += time.perf_counter() - started
            held = bcwi.held_out
            scores.append(CandidateScore(name, held["error_rate"], held["nfr"], seconds, bcwi.checkpoint))
            continue
        assert record.val_error_rate is not None and record.history  # the stages train with the val split
        val_nfr = record.history[-1]["val_nfr"]
        scores.append(CandidateScore(name, record.val_error_rate, val_nfr, seconds, record.checkpoint))
    trained.scores += scores
    return scores


def bcwi_held_to(plan: Plan, none_val_error_rate: float | None, max_er_increase: float, tuned: TrainRecord) -> Plan:
    """bcwi's plan with its α held to auto's limit: the largest val ER it may pick is no treatment's
    val ER + max_er_increase (its own rule measures from α = 0, the fine-tuned model's val ER), so
    that the α it picks is one auto can ship; and α < 1: α = 1 is the old model itself, which flips
    nothing and is no update."""
    assert none_val_error_rate is not None and tuned.val_error_rate is not None
    allowed = none_val_error_rate + max_er_increase - tuned.val_error_rate
    alphas = tuple(a for a in plan.spec.method.bcwi_alphas if a < 1) or (0.0,)
    method = plan.spec.method.model_copy(update={"bcwi_er_tolerance": max(0.0, allowed), "bcwi_alphas": alphas})
    return dataclasses.replace(plan, spec=plan.spec.model_copy(update={"method": method}))
