"""What auto tests its candidates on, gathered a round of trainings at a time (auto.py runs the
rounds): every model's class ids on the val split (bcwi's cross-fitted), each candidate's paired
counts against no treatment there (`PairedCounts`), its worst val slice against the spec's slice
gate, and, when `method.cross_fit` applies, the folds' counts on the train samples the old model
never trained on (auto_folds.py), pooled with val's as effective counts; with `cross_fit: auto`,
not for a candidate whose val figures the folds could not turn into a pass (`worth_folds`)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from orchestrator.dataplane.slice_reads import SliceSource, sample_slice_values
from orchestrator.driver.auto_folds import cross_fit, folds_for, unseen_train_ids
from orchestrator.driver.auto_training import Trained
from orchestrator.execution.evaluation import SplitPredictions, split_predictions
from orchestrator.execution.watch import StageWatch
from orchestrator.planning.plan import Plan
from orchestrator.policy.auto_choice import AUTO_CONFIDENCE, PairedCounts, futile
from pipelines.auto import cross_fits
from workers.confidence import corrected_resampled_effect
from workers.slices import slice_over_limit
from workers.tasks.records import BcwiRecord
from workers.trial_choice import CandidateScore


@dataclasses.dataclass
class Evidence:
    """The val split's ids and labels, every model's class ids there, each candidate's counts against
    no treatment and which samples they are; the folds' settings (J, K, why, the unseen train ids;
    None until the first round) and record (None: val only)."""

    val: SplitPredictions | None = None
    counts: dict[str, PairedCounts] = dataclasses.field(default_factory=dict)
    where: dict[str, str] = dataclasses.field(default_factory=dict)
    folds: tuple[int, int, str, np.ndarray | None] | None = None
    record: dict[str, Any] | None = None


def aligned(first: SplitPredictions, later: SplitPredictions) -> dict[str, np.ndarray]:
    """`later`'s class ids in `first`'s sample order (the same split, read again)."""
    order = np.argsort(later.ids)
    at = order[np.searchsorted(later.ids[order], first.ids)]
    assert np.array_equal(later.ids[at], first.ids), "the val split changed between rounds"
    return {name: ids[at] for name, ids in later.classes.items()}


def held_out_classes(val: SplitPredictions, bcwi: BcwiRecord | None) -> np.ndarray | None:
    """bcwi's cross-fitted val class ids (each half at the α the other half picked): the α picked on
    the whole split would score itself on the samples it was picked on."""
    if bcwi is None or bcwi.held_out_classes is None:
        return None
    return np.array([bcwi.held_out_classes[int(i)] for i in val.ids], np.int64)


def add_val_evidence(plan: Plan, evidence: Evidence, trained: Trained, scores: list[CandidateScore]) -> None:
    """One pass over the val split for the round's `scores` (with the old model's, the first round):
    their class ids, their counts against no treatment, their val ER and NFR, and their worst slice."""
    assert plan.spec.old is not None
    first = evidence.val is None
    checkpoints = {**({"old": plan.spec.old} if first else {}), **{c.name: c.checkpoint for c in scores}}
    read = split_predictions(plan, checkpoints, split="val")
    if evidence.val is None:
        evidence.val = read
    else:
        evidence.val.classes.update(aligned(evidence.val, read))
    val, classes = evidence.val, evidence.val.classes
    held = held_out_classes(val, trained.bcwi) if any(c.name == "bcwi" for c in scores) else None
    if held is not None:
        classes["bcwi"] = held
    known = np.ones(len(val.labels), bool) if plan.old.classes is None else np.isin(val.labels, plan.old.classes)
    for c in scores:
        counts = PairedCounts.of(classes["old"], classes["none"], classes[c.name], val.labels, known)
        evidence.counts[c.name], evidence.where[c.name] = counts, "val samples"
        c.val_error_rate, c.val_nfr = float(np.mean(classes[c.name] != val.labels)), counts.nfr
    hold_to_slices(plan, scores, val)


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


def settle_folds(plan: Plan, trained: Trained, watch: StageWatch) -> tuple[int, int, str, np.ndarray | None]:
    """Whether auto cross-fits (J, K, why, the train ids the old model never trained on; None: val
    only), settled once no treatment has trained (auto_folds.folds_for)."""
    assert plan.auto is not None
    names = [c.name for c in plan.auto.candidates if cross_fits(c)]
    folds, of, why = folds_for(plan, trained.records["none"].seconds)
    unseen = unseen_train_ids(plan) if folds and len(names) > 1 else None
    if unseen is None or not len(unseen):
        if folds and len(names) > 1:
            why = "the old model's training rows are unknown (old is not a registered version), or it trained on all"
        watch.say(f"auto: testing on the val split ({why if len(names) > 1 else 'no candidate cross-fitting trains'})")
        return folds, of, why, None
    watch.say(f"auto: cross-fitting {', '.join(names)} on {folds} of {of} folds of train ∪ val ({why})")
    return folds, of, why, unseen


def worth_folds(plan: Plan, evidence: Evidence, trained: Trained, fitted: list[str], watch: StageWatch) -> list[str]:
    """With `cross_fit: auto`, the candidates of `fitted` the folds could prove: one whose val figures
    would still fail its test with the folds' effective samples (J of K of the unseen train samples,
    over the design effect) at the same proportions is not cross-fitted; it fails on val
    (policy/auto_choice.py `futile`). An explicit J cross-fits every one."""
    assert evidence.folds is not None
    folds, of, _, unseen = evidence.folds
    assert unseen is not None
    if plan.spec.method.cross_fit != "auto":
        return fitted
    more = len(unseen) * folds / of / corrected_resampled_effect(folds, of)
    limit, over = plan.spec.method.max_er_increase, {c.name: c.val_slice_over for c in trained.scores}
    kept = []
    for name in fitted:
        why = futile(evidence.counts[name], more, limit, AUTO_CONFIDENCE, over.get(name))
        if not why:
            kept.append(name)
            continue
        evidence.where[name] = (
            f"val samples (not cross-fitted: at its val figures the folds' {more:,.0f} effective samples "
            "would not prove it)"
        )
        watch.say(f"auto: {name} not cross-fitted: at its val figures the folds could not prove it ({'; '.join(why)})")
    return kept


def add_fold_evidence(plan: Plan, evidence: Evidence, trained: Trained, names: list[str], watch: StageWatch) -> None:
    """The round's candidates `names` that cross-fitting trains, on its folds (no treatment's fold
    models trained in the first round and reused after): their fold counts added to their val counts
    as effective counts, and to the cross-fitting's record."""
    if evidence.folds is None:
        evidence.folds = settle_folds(plan, trained, watch)
    folds, of, why, unseen = evidence.folds
    assert plan.auto is not None
    fits = {c.name for c in plan.auto.candidates if cross_fits(c)}
    fitted = [name for name in names if name in fits and name != "none"]
    if unseen is None or not fitted:
        return
    fitted = worth_folds(plan, evidence, trained, fitted, watch)
    if not fitted:
        return
    measured = cross_fit(plan, folds, of, ["none", *fitted], unseen, watch)
    record = evidence.record or {"folds": folds, "of": of, "why": why, "trainings": 0, "seconds": 0.0}
    record["trainings"] += folds * (len(fitted) + ("none" not in record.get("counts", {})))
    record["seconds"] += measured.seconds
    record["design_effect"] = measured.pooled["none"].design_effect
    record["counts"] = {**record.get("counts", {}), **{n: dataclasses.asdict(c) for n, c in measured.pooled.items()}}
    evidence.record = record
    n = measured.pooled["none"].n
    for name in fitted:
        evidence.counts[name] = evidence.counts[name].effective() + measured.pooled[name].effective()
        evidence.where[name] = (
            f"effective samples: the val split's and {n:,.0f} train samples the old model never trained on, "
            f"in {folds} of {of} folds"
        )
