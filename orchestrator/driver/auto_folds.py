"""auto's cross-fitting (`method.cross_fit`): evidence from every labelled sample, not the val split alone.

The candidates that train once (no treatment, kd, fd-lm, bcwi, proximal: CROSS_FIT_CANDIDATES) train K more
times, fold k on train ∪ val outside fold k (workers/data/folds.py), each as a spec naming its
method would train, with its teachers in its own process; bcwi picks its α on its fold's val
halves and is counted on its cross-fitted answers there, as on val. Every fold's val samples are
predicted by that fold's models and counted against that fold's no treatment (PairedCounts); the
counts are pooled over the folds and their bounds widened by the corrected resampled design effect
(workers/confidence.py). The old model is the same in every fold. The shipped model is the
candidate's own training on the train split, what the folds' models estimate.

Rows the old model trained on are counted like any other: a flip there is a sample the deployed
model answered right, and a user sees it flip. `PairedCounts` on the val split's rows alone (which
no version of a model trained on: splits are by sample id) are reported beside them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from orchestrator.driver.auto_training import bcwi_held_to
from orchestrator.execution.evaluation import split_predictions
from orchestrator.execution.stages import run_bcwi, train_students
from orchestrator.execution.watch import StageWatch
from orchestrator.planning.plan import Plan
from orchestrator.policy.auto_choice import PairedCounts
from pipelines.auto import CROSS_FIT_AUTO_SECONDS
from workers.confidence import corrected_resampled_effect
from workers.tasks.records import BcwiRecord, TrainJob, TrainRecord


def folds_for(plan: Plan, none_seconds: float) -> tuple[int, str]:
    """(K, why) for the spec's `cross_fit` as planning settled it (`plan.cross_fit`, 0: off; planning
    turns auto off for a streamed source or a class with fewer than K labelled samples): auto
    cross-fits when no treatment's training took ≤ CROSS_FIT_AUTO_SECONDS."""
    setting, folds = plan.spec.method.cross_fit, plan.cross_fit
    if not folds:
        return 0, "cross_fit off" if setting == "off" else "the labelled samples do not fit 5 folds"
    if setting != "auto":
        return folds, f"cross_fit {folds}"
    if none_seconds > CROSS_FIT_AUTO_SECONDS:
        return 0, f"no treatment trained in {none_seconds:.0f} s > {CROSS_FIT_AUTO_SECONDS:.0f} s: not cross-fitted"
    return folds, f"no treatment trained in {none_seconds:.0f} s ≤ {CROSS_FIT_AUTO_SECONDS:.0f} s"


def fold_plan(plan: Plan, fold: int, folds: int) -> Plan:
    """The plan of fold `fold` of `folds`: its data request cut to the fold, its content key (which
    names checkpoints) the fold's own."""
    key = hashlib.sha256(f"{plan.splits.content_key} fold {fold}/{folds}".encode()).hexdigest()[:16]
    splits = dataclasses.replace(plan.splits, content_key=key, train_split=None)
    return dataclasses.replace(plan, data=dataclasses.replace(plan.data, fold=(fold, folds)), splits=splits)


@dataclass(frozen=True)
class FoldEvidence:
    """What cross-fitting measured: each candidate's pooled counts (over every labelled sample) and
    on the val split's rows alone, the folds, the trainings run and their seconds."""

    folds: int
    pooled: dict[str, PairedCounts]
    on_val_rows: dict[str, PairedCounts]
    trainings: int
    seconds: float


@dataclass(frozen=True)
class Fold:
    """Fold k's plan, each candidate's plan in it and its training job (teachers in process)."""

    plan: Plan
    plans: dict[str, Plan]
    jobs: list[TrainJob]


def fold_of_plan(plan: Plan, fold: int, folds: int, names: Sequence[str]) -> Fold:
    assert plan.auto is not None
    planned = fold_plan(plan, fold, folds)
    plans = {c.name: planned.candidate(c) for c in plan.auto.candidates if c.name in names}
    jobs = [
        dataclasses.replace(p.student_job(teachers=p.teacher_groups([]) or None), name=f"fold-{fold + 1}-{name}")
        for name, p in plans.items()
    ]
    return Fold(planned, plans, jobs)


def fold_counts(
    fold: Fold, trained: dict[str, TrainRecord], bcwi: BcwiRecord | None, plan: Plan, val_ids: np.ndarray
) -> tuple[dict[str, PairedCounts], dict[str, PairedCounts]]:
    """One fold's counts against its no treatment: on all its val samples, and on those of the
    val split proper (`val_ids`: the rows no version trained on)."""
    assert plan.spec.old is not None
    checkpoints = {"old": plan.spec.old, **{n: r.checkpoint for n, r in trained.items() if n != "bcwi"}}
    val = split_predictions(fold.plan, checkpoints, split="val")
    classes = dict(val.classes)
    if bcwi is not None and bcwi.held_out_classes is not None:
        classes["bcwi"] = np.array([bcwi.held_out_classes[int(i)] for i in val.ids], np.int64)
    known_classes = plan.old.classes
    known = np.ones(len(val.labels), bool) if known_classes is None else np.isin(val.labels, known_classes)
    proper = np.isin(val.ids, val_ids)
    every, on_val = {}, {}
    for name in trained:
        old, none, new, labels = classes["old"], classes["none"], classes[name], val.labels
        every[name] = PairedCounts.of(old, none, new, labels, known)
        on_val[name] = PairedCounts.of(old[proper], none[proper], new[proper], labels[proper], known[proper])
    return every, on_val


def cross_fit(plan: Plan, folds: int, names: Sequence[str], val_ids: np.ndarray, watch: StageWatch) -> FoldEvidence:
    """Train, predict and count every fold (module docstring): every candidate of `names` on every
    fold submitted at once (side by side as the CPUs allow), then each fold's bcwi α and counts;
    the pooled counts carry the design effect of `folds` folds. `val_ids`: the val split's."""
    started = time.perf_counter()
    limit = plan.spec.method.max_er_increase
    cut = [fold_of_plan(plan, k, folds, names) for k in range(folds)]
    records = iter(train_students(plan, watch, None, [job for fold in cut for job in fold.jobs]))
    pooled: dict[str, PairedCounts] = {}
    on_val: dict[str, PairedCounts] = {}
    for k, fold in enumerate(cut):
        trained = {name: next(records) for name in fold.plans}
        bcwi = None
        if "bcwi" in trained:
            held = bcwi_held_to(fold.plans["bcwi"], trained["none"].val_error_rate, limit, trained["bcwi"])
            bcwi = run_bcwi(held, trained["bcwi"])
        every, proper = fold_counts(fold, trained, bcwi, plan, val_ids)
        for name in trained:
            pooled[name] = every[name] if name not in pooled else pooled[name] + every[name]
            on_val[name] = proper[name] if name not in on_val else on_val[name] + proper[name]
        watch.say(f"auto: fold {k + 1}/{folds} counted ({', '.join(trained)})")
    effect = corrected_resampled_effect(folds)
    pooled = {name: dataclasses.replace(c, design_effect=effect) for name, c in pooled.items()}
    return FoldEvidence(folds, pooled, on_val, folds * len(cut[0].plans), time.perf_counter() - started)
