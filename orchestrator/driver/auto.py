"""`method: auto`: no treatment and the candidates that fit the budget (plan.auto), each trained as a
spec naming its method would train it, tested against no treatment on the val split in a fixed order
(orchestrator/policy/auto_choice.py): a candidate is proven when the upper 95% bound of its ER change
is ≤ `max_er_increase` and its NFR is proven lower; the lowest val NFR among the proven ships, else
no treatment. One pipeline run:

    replicas    m Ray tasks, once, when an elodi candidate is trained (both elodi share them)
    pool        Ray actors serving the old model (and the replicas), shared by every student
    candidates  one Ray task each, in turn (bcwi: its fine-tuning, then α on val, scored cross-fitted)
    val pass    every candidate's val predictions, in one pass (bcwi's: each half at the α the other
                half picked), counted against no treatment's (`PairedCounts`), and, with the spec's
                slice gate (promote.max_slice_nfr), its val slices: one over the limit fails it
    choice      on val only, in the order of `method.candidates` (fixed before anything is scored)
    shown       every candidate on the regression-eval split, after the choice: never chosen on
    evaluate    the choice, as `run` evaluates a model; then publish (pipeline.py)
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

from orchestrator.dataplane.slice_reads import SliceSource, sample_slice_values
from orchestrator.driver.auto_folds import cross_fit, folds_for, unseen_train_ids
from orchestrator.driver.auto_training import Trained, train_candidates
from orchestrator.driver.publish import PipelineResult, log_data_counts, pipeline_result, publish
from orchestrator.execution.evaluation import SplitPredictions, eval_split_predictions, evaluate, split_predictions
from orchestrator.execution.watch import StageWatch
from orchestrator.planning.plan import Plan, applied_params
from orchestrator.policy.auto_choice import AUTO_CONFIDENCE, PairedCounts, choose, closest, fixed_sequence
from orchestrator.tracking import runs
from orchestrator.tracking.tags import FINGERPRINT, RUN_AUTO_CHOICE
from orchestrator.views import plots
from orchestrator.views.format import percent
from pipelines.auto import CROSS_FIT_CANDIDATES
from workers.metrics import update_report
from workers.percent import short_percent
from workers.slices import slice_over_limit
from workers.tasks.records import BcwiRecord
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


def val_predictions(plan: Plan, scores: list[CandidateScore]) -> SplitPredictions:
    """The old model's and every candidate's class ids on the val split, in one pass (bcwi at the α
    it picked on the whole split; its ER and NFR stay the cross-fitted ones)."""
    assert plan.spec.old is not None
    return split_predictions(plan, {"old": plan.spec.old, **{c.name: c.checkpoint for c in scores}}, split="val")


def val_classes(val: SplitPredictions, bcwi: BcwiRecord | None) -> dict[str, np.ndarray]:
    """Every model's val class ids, bcwi's the cross-fitted ones (each half at the α the other half
    picked): the α picked on the whole split would score itself on the samples it was picked on."""
    classes = dict(val.classes)
    if bcwi is not None and bcwi.held_out_classes is not None:
        held = bcwi.held_out_classes
        classes["bcwi"] = np.array([held[int(i)] for i in val.ids], np.int64)
    return classes


def val_counts(plan: Plan, val: SplitPredictions, classes: dict[str, np.ndarray]) -> dict[str, PairedCounts]:
    """Each model's paired counts against no treatment on val (`classes`: `val_classes`), flips on
    the old model's classes."""
    known = np.ones(len(val.labels), bool) if plan.old.classes is None else np.isin(val.labels, plan.old.classes)
    return {
        name: PairedCounts.of(classes["old"], classes["none"], ids, val.labels, known)
        for name, ids in classes.items()
        if name != "old"
    }


def prove_candidates(
    plan: Plan, scores: list[CandidateScore], counts: dict[str, PairedCounts], where: dict[str, str]
) -> tuple[str, str | None]:
    """Each candidate's counts against no treatment (`where`: which samples, "val" or the folds'),
    tested in the fixed order of `method.candidates` (policy/auto_choice.py); fills each score's
    test fields; returns the name that ships and, when that is no treatment, the line on the
    candidate that came closest."""
    assert plan.auto is not None
    by_name = {c.name: c for c in scores}
    by_name["none"].eligible = True
    ordered = [
        (c.name, counts[c.name], by_name[c.name].val_slice_over, where[c.name]) for c in plan.auto.candidates[1:]
    ]
    limit = plan.spec.method.max_er_increase
    tests = fixed_sequence(ordered, limit, AUTO_CONFIDENCE)
    for test in tests:
        c = by_name[test.name]
        c.val_er_change, c.val_er_upper = test.er_change, test.er_upper
        c.val_nfr_change, c.val_nfr_upper = test.nfr_change, test.nfr_upper
        c.tested, c.failed, c.eligible, c.evidence = test.tested, list(test.failed), test.passed, test.where
    return choose(tests), closest(tests, limit)


def score_on_val(
    scores: list[CandidateScore], val: SplitPredictions, classes: dict[str, np.ndarray], counts: dict[str, PairedCounts]
) -> None:
    """Each candidate's val ER and NFR (bcwi's at its cross-fitted α), from the val pass."""
    for c in scores:
        c.val_error_rate, c.val_nfr = float(np.mean(classes[c.name] != val.labels)), counts[c.name].nfr


def gather_evidence(
    plan: Plan, trained: Trained, counts: dict[str, PairedCounts], watch: StageWatch
) -> tuple[dict[str, str], dict[str, Any] | None]:
    """What each candidate is tested on: the val split's counts of the shipped candidates, and for
    those cross-fitting trains (auto_folds.py), when `method.cross_fit` applies, also the folds'
    counts on the train samples the old model never trained on, pooled as effective counts;
    (which samples each counted, the cross-fitting's record or None)."""
    assert plan.auto is not None
    where = {c.name: "val samples" for c in trained.scores}
    names = [c.name for c in plan.auto.candidates if c.name in CROSS_FIT_CANDIDATES]
    folds, of, why = folds_for(plan, trained.records["none"].seconds)
    unseen = unseen_train_ids(plan) if folds and len(names) > 1 else None
    if unseen is None or not len(unseen):
        if folds and len(names) > 1:
            why = "the old model's training rows are unknown (old is not a registered version), or it trained on all"
        watch.say(f"auto: testing on the val split ({why if len(names) > 1 else 'no candidate cross-fitting trains'})")
        return where, None
    watch.say(f"auto: cross-fitting {', '.join(names)} on {folds} of {of} folds of train ∪ val ({why})")
    evidence = cross_fit(plan, folds, of, names, unseen, watch)
    n = evidence.pooled["none"].n
    for name in names:
        counts[name] = counts[name].effective() + evidence.pooled[name].effective()
        where[name] = (
            f"effective samples: the val split's and {n:,.0f} train samples the old model never trained on, "
            f"in {folds} of {of} folds"
        )
    record = {
        "folds": folds,
        "of": of,
        "why": why,
        "trainings": evidence.trainings,
        "seconds": evidence.seconds,
        "design_effect": evidence.pooled["none"].design_effect,
        "counts": {name: dataclasses.asdict(c) for name, c in evidence.pooled.items()},
    }
    return where, record


def hold_to_slices(
    plan: Plan, scores: list[CandidateScore], val: SplitPredictions, classes: dict[str, np.ndarray]
) -> None:
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
            classes["old"][known],
            classes[c.name][known],
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


def _points(value: float | None, upper: float | None) -> str:
    return "" if value is None or upper is None else f"{100 * value:+.2f} pt (≤ {100 * upper:+.2f})"


def candidates_table(record: AutoRecord) -> str:
    """The candidates as lines: val ER and NFR, their changes against no treatment with their upper
    bounds (chosen on), whether the fixed order proved it, eval ER / NFR (shown), seconds; what each
    failed; the closest candidate when none was proven."""
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
    failed = [f"  {c.name}: {'; '.join(c.failed)}" for c in record.candidates if c.failed]
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
        trained = train_candidates(plan, watch)
        val = val_predictions(plan, trained.scores)
        classes = val_classes(val, trained.bcwi)
        counts = val_counts(plan, val, classes)
        score_on_val(trained.scores, val, classes, counts)
        hold_to_slices(plan, trained.scores, val, classes)
        where, folds = gather_evidence(plan, trained, counts, watch)
        name, near = prove_candidates(plan, trained.scores, counts, where)
        chosen = next(c for c in trained.scores if c.name == name)
        watch.say(f"auto: {chosen.name} ships, chosen on the validation split (val NFR {percent(chosen.val_nfr)})")
        score_on_eval(plan, trained.scores)
        bcwi = None if trained.bcwi is None else {k: getattr(trained.bcwi, k) for k in ("alpha", "sweep", "held_out")}
        skipped = list(plan.auto.skipped)
        record = AutoRecord(chosen.name, spec.method.max_er_increase, trained.scores, skipped, bcwi, near)
        record.cross_fit = folds
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
