"""`method: auto`: no treatment and the candidates that fit the budget (plan.auto), each trained as a
spec naming its method would train it, tested against no treatment on the val split in a fixed order
(orchestrator/policy/auto_choice.py): a candidate is proven when the upper 95% bound of its ER change
is ≤ `max_er_increase` and its NFR is proven lower; the largest NFR cut among the proven ships, else
no treatment. One pipeline run:

    rounds      no treatment with the first candidate, then one candidate a round (all at once with
                `method.train_untested`), each round (auto_training.py, auto_evidence.py):
      replicas  m Ray tasks, once, when an elodi candidate comes (both elodi share them)
      pool      Ray actors serving the old model (and the replicas), shared by the round's students
      train     one Ray task each, in turn (bcwi: its fine-tuning, then α on val, scored cross-fitted)
      val pass  the round's val predictions (bcwi's: each half at the α the other half picked),
                counted against no treatment's (`PairedCounts`), and, with the spec's slice gate
                (promote.max_slice_nfr), its val slices: one over the limit fails it
      folds     with cross-fitting, the round's candidates on J folds too (auto_folds.py); with
                `cross_fit: auto` not those whose val figures the folds could not turn into a pass
      test      every candidate trained so far, in the order of `method.candidates` (fixed before
                anything is scored); a failure ends the rounds: what comes after it cannot ship
    choice      on val (and the folds) only
    shown       every candidate on the regression-eval split, after the choice: never chosen on
    evaluate    the choice, as `run` evaluates a model; then publish (pipeline.py)
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

from orchestrator.driver.auto_evidence import Evidence, add_fold_evidence, add_val_evidence
from orchestrator.driver.auto_training import Trained, train_more
from orchestrator.driver.publish import PipelineResult, log_data_counts, pipeline_result, publish
from orchestrator.execution.evaluation import eval_split_predictions, evaluate
from orchestrator.execution.old_answers import old_answers_stage
from orchestrator.execution.watch import StageWatch
from orchestrator.planning.plan import Plan, applied_params
from orchestrator.policy.auto_choice import (
    AUTO_CONFIDENCE,
    CandidateTest,
    PairedCounts,
    choose,
    closest,
    fixed_sequence,
)
from orchestrator.tracking import runs
from orchestrator.tracking.tags import FINGERPRINT, RUN_AUTO_CHOICE
from orchestrator.views import plots
from orchestrator.views.format import percent
from workers.metrics import update_report
from workers.percent import short_percent
from workers.trial_choice import CandidateScore


@dataclasses.dataclass
class AutoRecord:
    """What auto trained, how each scored, what it chose (auto.json; the version's tags)."""

    chosen: str
    max_er_increase: float
    candidates: list[CandidateScore]
    skipped: list[tuple[str, str]]
    bcwi: dict[str, Any] | None = None  # its α, val sweep and cross-fitted val figures (its val_* above)
    closest: str | None = None  # when no candidate was proven: which came nearest, and by how much
    confidence: float = AUTO_CONFIDENCE
    cross_fit: dict[str, Any] | None = None  # folds, trainings, seconds, pooled counts (auto_folds.py); None: val only


def rounds(plan: Plan) -> list[list[str]]:
    """The candidates' trainings in rounds, in auto's order: no treatment with the first candidate,
    then one candidate a round, so that training stops where the fixed order's testing does; all in
    one round with `method.train_untested`."""
    assert plan.auto is not None
    names = [c.name for c in plan.auto.candidates]
    return [names[:2], *[[name] for name in names[2:]]] if plan.auto.stops else [names]


def prove_candidates(
    plan: Plan, scores: list[CandidateScore], counts: dict[str, PairedCounts], where: dict[str, str]
) -> list[CandidateTest]:
    """The trained candidates' counts against no treatment (`where`: which samples, "val" or the
    folds'), tested in the fixed order of `method.candidates` (policy/auto_choice.py); fills each
    score's test fields and returns the tests."""
    assert plan.auto is not None
    by_name = {c.name: c for c in scores}
    by_name["none"].eligible = True
    ordered = [
        (c.name, counts[c.name], by_name[c.name].val_slice_over, where[c.name])
        for c in plan.auto.candidates[1:]
        if c.name in by_name
    ]
    tests = fixed_sequence(ordered, plan.spec.method.max_er_increase, AUTO_CONFIDENCE)
    for test in tests:
        c = by_name[test.name]
        c.val_er_change, c.val_er_upper = test.er_change, test.er_upper
        c.val_nfr_change, c.val_nfr_upper = test.nfr_change, test.nfr_upper
        c.tested, c.failed, c.eligible, c.evidence = test.tested, list(test.failed), test.passed, test.where
    return tests


def train_and_test(plan: Plan, watch: StageWatch) -> tuple[Trained, Evidence, list[CandidateTest]]:
    """auto's rounds (`rounds`): each trains its candidates, counts them on val (and the folds) and
    tests every candidate trained so far in the fixed order; a round whose candidate fails ends the
    training (what comes after it could not ship)."""
    trained, evidence, tests = Trained(), Evidence(), []
    for names in rounds(plan):
        scores = train_more(plan, watch, trained, names)
        add_val_evidence(plan, evidence, trained, scores)
        add_fold_evidence(plan, evidence, trained, names, watch)
        tests = prove_candidates(plan, trained.scores, evidence.counts, evidence.where)
        failed = next((t for t in tests if t.tested and t.failed), None)
        if failed is not None and plan.auto is not None and plan.auto.stops:
            watch.say(f"auto: {failed.name} failed its test ({'; '.join(failed.failed)}): training stops there")
            break
    return trained, evidence, tests


def untrained(plan: Plan, trained: Trained, tests: list[CandidateTest]) -> list[tuple[str, str]]:
    """The candidates a failure in the fixed order left untrained, with why."""
    assert plan.auto is not None
    failed = next((t.name for t in tests if t.tested and t.failed), "")
    why = f"not trained: {failed} failed its test first in the fixed order (method.train_untested trains it)"
    return [(c.name, why) for c in plan.auto.candidates if c.name not in trained.records]


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


def _points(value: float | None, upper: float | None) -> str:
    return "" if value is None or upper is None else f"{100 * value:+.2f} pt (≤ {100 * upper:+.2f})"


def _unfitted(c: CandidateScore) -> str:
    return f", on {c.evidence}" if "not cross-fitted" in c.evidence else ""


def candidates_table(record: AutoRecord) -> str:
    """The candidates as lines: val ER and NFR, their changes against no treatment with their upper
    bounds (chosen on), whether the fixed order proved it, eval ER / NFR (shown), seconds; what each
    failed; those left out (untrained) and why; the closest candidate when none was proven."""
    from orchestrator.views.tables import table

    rows = [
        [
            ("→ " if c.name == record.chosen else "  ") + c.name,
            percent(c.val_error_rate),
            _points(c.val_er_change, c.val_er_upper),
            percent(c.val_nfr),
            _points(c.val_nfr_change, c.val_nfr_upper),
            "-" if c.name == "none" else ("yes" if c.eligible else "no" if c.tested else "not tested"),
            percent(c.error_rate),
            percent(c.nfr),
            f"{c.seconds:.0f}",
        ]
        for c in record.candidates
    ]
    level = short_percent(record.confidence)
    headers = ["candidate", "val ER", f"− none's (≤ {level} bound)", "val NFR", "− none's (≤ bound)", "proven"]
    headers += ["eval ER", "eval NFR", "seconds"]
    failed = [f"  {c.name}: {'; '.join(c.failed)}{_unfitted(c)}" for c in record.candidates if c.failed]
    failed += [f"  left out {name}: {why}" for name, why in record.skipped]
    if record.closest is not None:
        failed.append(f"  no candidate proven, no treatment ships: {record.closest}")
    return "\n".join([table(headers, rows, left=1), *failed, *fold_lines(record)])


def fold_lines(record: AutoRecord) -> list[str]:
    """With cross-fitting: what the folds counted, and each candidate's ER and NFR change there."""
    folds = record.cross_fit
    if folds is None:
        return []
    pooled = {name: PairedCounts(**c) for name, c in folds["counts"].items()}
    lines = [
        f"  cross-fitted: {pooled['none'].n:,.0f} train samples the old model never trained on, in {folds['folds']} "
        f"of {folds['of']} folds, each predicted by a model that never trained on it (design effect "
        f"{folds['design_effect']:.2f}; {folds['trainings']} trainings, {folds['seconds']:.0f} s), pooled with val"
    ]
    changes = [
        f"{name} ER {100 * c.er_change:+.2f} pt, NFR {100 * c.nfr_change:+.2f} pt"
        for name, c in pooled.items()
        if name != "none"
    ]
    return [*lines, f"  on the folds, against no treatment: {'; '.join(changes)}"]


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
        old_answers_stage(plan, watch)
        trained, evidence, tests = train_and_test(plan, watch)
        name, near = choose(tests), closest(tests, spec.method.max_er_increase)
        chosen = next(c for c in trained.scores if c.name == name)
        watch.say(f"auto: {chosen.name} ships, chosen on the validation split (val NFR {percent(chosen.val_nfr)})")
        score_on_eval(plan, trained.scores)
        bcwi = None if trained.bcwi is None else {k: getattr(trained.bcwi, k) for k in ("alpha", "sweep", "held_out")}
        skipped = [*plan.auto.skipped, *untrained(plan, trained, tests)]
        record = AutoRecord(chosen.name, spec.method.max_er_increase, trained.scores, skipped, bcwi, near)
        record.cross_fit = evidence.record
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
