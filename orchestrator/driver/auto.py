"""`method: auto`: no treatment and the candidates that fit the budget (plan.auto), each trained as a
spec naming its method would train it, scored on the val split; the lowest val NFR among those whose
val ER is at most no treatment's + `max_er_increase` is shipped. One pipeline run:

    replicas    m Ray tasks, once, when an elodi candidate is trained (both elodi share them)
    pool        Ray actors serving the old model (and the replicas), shared by every student
    candidates  one Ray task each, in turn (bcwi: its fine-tuning, then α on val, scored cross-fitted)
    val pass    every candidate's val predictions, in one pass: the paired standard error of its val
                ER change against no treatment (shown beside the bound), and, with the spec's slice
                gate (promote.max_slice_nfr), its val slices: one over the limit makes it not eligible
    choice      on val only (workers/trial_choice.py, `choose_candidate`)
    shown       every candidate on the regression-eval split, after the choice: never chosen on
    evaluate    the choice, as `run` evaluates a model; then publish (pipeline.py)
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from orchestrator.dataplane.slice_reads import SliceSource, sample_slice_values
from orchestrator.driver.publish import PipelineResult, log_data_counts, pipeline_result, publish
from orchestrator.execution.evaluation import SplitPredictions, eval_split_predictions, evaluate, split_predictions
from orchestrator.execution.pool import serving_pool
from orchestrator.execution.stages import run_bcwi, train_replicas, train_student, train_students
from orchestrator.execution.watch import StageWatch
from orchestrator.planning.plan import Plan, applied_params
from orchestrator.tracking import runs
from orchestrator.tracking.tags import FINGERPRINT, RUN_AUTO_CHOICE
from orchestrator.views import plots
from orchestrator.views.format import bcwi_line, percent
from workers.metrics import error_rate_change_se, update_report
from workers.slices import slice_over_limit
from workers.tasks.records import BcwiRecord, TrainRecord
from workers.trial_choice import CandidateScore, choose_candidate


@dataclasses.dataclass
class AutoRecord:
    """What auto trained, how each scored, what it chose (auto.json; the version's tags)."""

    chosen: str
    max_er_increase: float
    candidates: list[CandidateScore]
    skipped: list[tuple[str, str]]
    bcwi: dict[str, Any] | None = None  # its α, val sweep and cross-fitted val figures (its val_* above)


@dataclasses.dataclass
class Trained:
    """The candidates' trainings: the replicas (shared by the elodi candidates), each candidate's
    training record, bcwi's sweep, and their scores on val."""

    replicas: list[TrainRecord]
    records: dict[str, TrainRecord]
    bcwi: BcwiRecord | None
    scores: list[CandidateScore]


def auto_titles(plan: Plan) -> list[str]:
    """The numbered stages auto runs, as the progress lines name them."""
    assert plan.auto is not None
    titles = []
    if plan.auto.replicas:
        titles.append(f"training {plan.spec.method.m} replicas of {plan.spec.arch} in parallel (for elodi)")
    names = ", ".join(c.name for c in plan.auto.candidates)
    how = "in turn, from the teacher pool" if plan.pool_actors else "side by side, each with its teachers in process"
    titles.append(f"training the candidates {names} ({how})")
    titles.append("choosing on the validation split, then evaluating on the regression-eval split")
    return [f"stage {i}/{len(titles)}: {title}" for i, title in enumerate(titles, 1)]


def train_candidates(plan: Plan, watch: StageWatch) -> Trained:
    """The replicas once (an elodi candidate), one teacher pool for every student, each candidate's
    training in turn, bcwi's α on val; each candidate's val ER and NFR against the old model."""
    assert plan.auto is not None and plan.spec.old is not None  # auto needs old (the spec's validator)
    titles = iter(auto_titles(plan))
    plans = {c.name: plan.candidate(c) for c in plan.auto.candidates}
    replicas: list[TrainRecord] = []
    replica_seconds = 0.0
    elodi = [name for name in plans if name.startswith("elodi")]
    if elodi:
        watch.say(next(titles))
        started = time.perf_counter()
        replicas = train_replicas(plans[elodi[0]], watch)
        replica_seconds = time.perf_counter() - started
    groups = {"old": [plan.spec.old], **({"teacher": [r.checkpoint for r in replicas]} if replicas else {})}
    data_parallel = plan.spec.resources.student.workers > 1
    records: dict[str, TrainRecord] = {}
    bcwi, scores = None, []
    with serving_pool(plan, groups, with_student=not data_parallel, spread=data_parallel) as pool:
        watch.say(next(titles))
        jobs = {}
        for name, candidate in plans.items():
            own = candidate.teacher_groups([r.checkpoint for r in replicas] if name.startswith("elodi") else [])
            in_process = own if pool is None and candidate.objective.references else None
            jobs[name] = dataclasses.replace(candidate.student_job(teachers=in_process), name=f"candidate-{name}")
        if pool is None and not data_parallel:  # no pool to share: as many at once as the CPUs hold
            records = dict(zip(jobs, train_students(plan, watch, None, list(jobs.values()))))
        for name, job in jobs.items():
            if name not in records:  # one at a time: the pool reserves one student
                records[name] = train_student(plans[name], watch, pool, job)
    reference = records["none"].val_error_rate
    for name, record in records.items():
        seconds = record.seconds + (replica_seconds if elodi and name == elodi[0] else 0.0)  # it paid for them
        if name == "bcwi":  # after the pool is gone: its task is not one the pool reserved
            started = time.perf_counter()
            limit = plan.spec.method.max_er_increase
            bcwi = run_bcwi(bcwi_held_to(plans[name], reference, limit, record), record)
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
    return Trained(replicas, records, bcwi, scores)


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


def val_predictions(plan: Plan, scores: list[CandidateScore]) -> SplitPredictions:
    """The old model's and every candidate's class ids on the val split, in one pass (bcwi at the α
    it picked on the whole split; its ER and NFR stay the cross-fitted ones)."""
    assert plan.spec.old is not None
    return split_predictions(plan, {"old": plan.spec.old, **{c.name: c.checkpoint for c in scores}}, split="val")


def measure_val_noise(scores: list[CandidateScore], val: SplitPredictions) -> None:
    """Each candidate's `val_er_se`: the paired standard error of its val ER − no treatment's, the
    grain at which the val split can tell a candidate's ER cost (docs/benchmarks/index.md: a val ER change
    moved to eval by ±0.6 pt on 4,350 val samples)."""
    for c in scores:
        if c.name != "none":
            c.val_er_se = error_rate_change_se(val.classes["none"], val.classes[c.name], val.labels)


def hold_to_slices(plan: Plan, scores: list[CandidateScore], val: SplitPredictions) -> None:
    """With the spec's slice gate (promote.max_slice_nfr), each candidate's `val_slice_over`: its
    worst val slice over the limit as the gate would find it (workers/slices.py), against the old
    model on its classes."""
    gate, data = plan.spec.promote, plan.spec.data
    if gate is None or gate.max_slice_nfr is None:
        return
    slices = sample_slice_values(val.ids, SliceSource.of(data))
    if slices is None:  # planning refuses a slice gate without slices (facts/slices.py)
        return
    known = np.ones(len(val.labels), bool) if plan.old.classes is None else np.isin(val.labels, plan.old.classes)
    on_known = {column: values[known] for column, values in slices.items()}
    for c in scores:
        c.val_slice_over = slice_over_limit(
            val.classes["old"][known],
            val.classes[c.name][known],
            val.labels[known],
            on_known,
            gate.max_slice_nfr,
            gate.confidence,
            gate.min_slice_n,
        )


def score_on_eval(plan: Plan, scores: list[CandidateScore]) -> None:
    """Every candidate's ER and NFR on the regression-eval split, in one pass (shown beside the val
    figures, after the choice; flips counted on the old model's classes)."""
    assert plan.spec.old is not None
    ids = eval_split_predictions(plan, {"old": plan.spec.old, **{c.name: c.checkpoint for c in scores}})
    labels = plan.splits.eval_labels
    known = np.ones(len(labels), bool) if plan.old.classes is None else np.isin(labels, plan.old.classes)
    for c in scores:
        c.error_rate = float(np.mean(ids[c.name] != labels))
        c.nfr = update_report(ids["old"][known], ids[c.name][known], labels[known])["nfr"]


def er_change(c: CandidateScore, none: CandidateScore) -> str:
    """A candidate's val ER − no treatment's, in points, ± its paired standard error where measured."""
    if c.name == "none":
        return ""
    change = f"{100 * (c.val_error_rate - none.val_error_rate):+.2f}"
    return change + ("" if c.val_er_se is None else f" ± {100 * c.val_er_se:.2f}") + " pt"


def noise_line(record: AutoRecord) -> list[str]:
    """One line when the val split measures ER changes more coarsely than auto's bound: the median
    paired standard error over the candidates, against `max_er_increase`."""
    errors = [c.val_er_se for c in record.candidates if c.val_er_se is not None]
    if not errors or statistics.median(errors) <= abs(record.max_er_increase):
        return []
    return [
        f"  the val split measures a candidate's ER change to ±{100 * statistics.median(errors):.2f} pt "
        "(a paired standard error, the candidates' median), more than auto's bound of "
        f"{100 * record.max_er_increase:+.2f} pt: "
        "which candidates pass it is partly chance, and their eval ER may differ by as much"
    ]


def candidates_table(record: AutoRecord) -> str:
    """The candidates as lines: val ER / NFR (chosen on) and the val ER change against no treatment
    with its paired standard error, eval ER / NFR (shown), seconds; a line when the val split is too
    coarse for auto's bound (`noise_line`)."""
    from orchestrator.views.tables import table

    none = next(c for c in record.candidates if c.name == "none")
    rows = [
        [
            ("→ " if c.name == record.chosen else "  ") + c.name,
            percent(c.val_error_rate),
            er_change(c, none),
            percent(c.val_nfr),
            "yes" if c.eligible else "no",
            percent(c.error_rate),
            percent(c.nfr),
            f"{c.seconds:.0f}",
        ]
        for c in record.candidates
    ]
    headers = ["candidate", "val ER", "val ER − none's", "val NFR", "eligible", "eval ER", "eval NFR", "seconds"]
    over = [
        f"  {c.name}: {'eligible all the same (no treatment)' if c.name == 'none' else 'not eligible'}, "
        f"val slice {c.val_slice_over}"
        for c in record.candidates
        if c.val_slice_over
    ]
    return "\n".join([table(headers, rows, left=1), *over, *noise_line(record)])


def scatter(record: AutoRecord, title: str) -> Any:
    """Every candidate's val ER against val NFR, the choice circled."""
    points = [plots.Point(c.val_error_rate, c.val_nfr, "candidates (val)", c.name) for c in record.candidates]
    chosen = next(p for p in points if p.label == record.chosen)
    return plots.er_nfr_scatter(points, title, highlight=chosen)


def log_auto(record: AutoRecord, trained: Trained, run_dir: Path) -> None:
    """The candidates' trainings (nested runs, the chosen one's is logged by publish), their val and
    eval figures as metrics auto.NAME.*, the choice as tag auto.choice, auto.json and auto_val.png."""
    for name, training in trained.records.items():
        if name != record.chosen:
            runs.log_training(f"candidate-{name}", training, {"method": name})
    for c in record.candidates:
        values = {k: getattr(c, k) for k in ("val_error_rate", "val_nfr", "error_rate", "nfr", "seconds")}
        runs.log_metrics(f"auto.{c.name}.", values)
    runs.set_tags({RUN_AUTO_CHOICE: record.chosen})
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "auto.json").write_text(json.dumps(dataclasses.asdict(record), indent=2))
    runs.log_file(run_dir / "auto.json")
    title = f"auto: candidates on the val split (chosen: {record.chosen})"
    runs.log_file(plots.save(scatter(record, title), run_dir / "auto_val.png"))


def run_auto(plan: Plan, run_dir: Path, watch: StageWatch) -> PipelineResult:
    """`method: auto` inside one MLflow run; returns its PipelineResult (the chosen candidate's
    evaluation, registered with auto's record). Ray must be initialised."""
    assert plan.auto is not None
    spec = plan.spec
    with runs.pipeline_run(spec, say=watch.say) as run_id:
        runs.set_tags({FINGERPRINT: plan.splits.eval_fingerprint})
        runs.log_params(applied_params(spec))
        log_data_counts(plan)
        trained = train_candidates(plan, watch)
        val = val_predictions(plan, trained.scores)
        measure_val_noise(trained.scores, val)
        hold_to_slices(plan, trained.scores, val)
        chosen = choose_candidate(trained.scores, spec.method.max_er_increase)
        watch.say(f"auto: {chosen.name} chosen on the validation split (val NFR {percent(chosen.val_nfr)})")
        score_on_eval(plan, trained.scores)
        bcwi = None if trained.bcwi is None else {k: getattr(trained.bcwi, k) for k in ("alpha", "sweep", "held_out")}
        record = AutoRecord(chosen.name, spec.method.max_er_increase, trained.scores, list(plan.auto.skipped), bcwi)
        watch.say(candidates_table(record))
        chosen_plan = plan.candidate(next(c for c in plan.auto.candidates if c.name == chosen.name))
        ensemble = [r.checkpoint for r in trained.replicas]
        evaluation = evaluate(chosen_plan, chosen.checkpoint, ensemble, run_dir, watch)
        log_auto(record, trained, run_dir)
        result = pipeline_result(
            plan,
            evaluation,
            chosen.checkpoint,
            run_id,
            replicas=trained.replicas,
            student=trained.records[chosen.name],
            bcwi=trained.bcwi if chosen.name == "bcwi" else None,
            seconds={f"auto.{c.name}": c.seconds for c in trained.scores},
            auto=dataclasses.asdict(record),
        )
        publish(chosen_plan, result, run_dir, watch, spec=spec)
    return result
