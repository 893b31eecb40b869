"""auto's cross-fitting (`method.cross_fit`): evidence beyond the val split.

The candidates that train once (CROSS_FIT_CANDIDATES) train J more times, fold k of the K folds of
train ∪ val on the other folds (workers/data/folds.py: as many samples as the shipped model), each
as a spec naming its method would train, with its teachers in its own process; bcwi picks its α on
its fold's val halves and is counted on its cross-fitted answers there, as on val. Each fold's
samples are predicted by that fold's models and counted against that fold's no treatment
(PairedCounts); the counts are pooled over the folds, their bounds widened by the corrected
resampled design effect (workers/confidence.py), and added, as effective counts, to the val split's
counts of the shipped candidates (auto.py). The old model is the same in every fold.

Only train samples the old model never trained on are counted: the val split's are already counted
on the shipped candidates themselves, and a candidate that reads the old model (its logits, its
weights) knows its answers on the rows it trained on, which no new sample would get from it (counted
there, the text demo's folds measured kd 1.6 and bcwi 11.5 pt of ER better than no treatment). The
old model's training rows are its registered run's training split, re-read from its spec; when
`old` is a checkpoint file they are unknown and auto tests on the val split alone.
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
from orchestrator.planning.plan import Plan, data_request
from orchestrator.policy.auto_choice import PairedCounts
from pipelines.auto import CROSS_FIT_AUTO_SECONDS
from workers.confidence import corrected_resampled_effect
from workers.tasks.records import BcwiRecord, TrainJob, TrainRecord


def folds_for(plan: Plan, none_seconds: float) -> tuple[int, int, str]:
    """(J, K, why) for the spec's `cross_fit` as planning settled it (`plan.cross_fit`, J 0: off;
    planning turns auto off for a streamed source or a class with fewer than J labelled samples):
    auto cross-fits when no treatment's training took ≤ CROSS_FIT_AUTO_SECONDS."""
    setting, (trained, folds) = plan.spec.method.cross_fit, plan.cross_fit
    if not trained:
        return 0, 0, "cross_fit off" if setting == "off" else "the labelled samples do not fit the folds"
    if setting != "auto":
        return trained, folds, f"cross_fit {trained}"
    if none_seconds > CROSS_FIT_AUTO_SECONDS:
        why = f"no treatment trained in {none_seconds:.0f} s > {CROSS_FIT_AUTO_SECONDS:.0f} s: not cross-fitted"
        return 0, 0, why
    return trained, folds, f"no treatment trained in {none_seconds:.0f} s ≤ {CROSS_FIT_AUTO_SECONDS:.0f} s"


def fold_plan(plan: Plan, fold: int, folds: int) -> Plan:
    """The plan of fold `fold` of `folds`: its data request cut to the fold, its content key (which
    names checkpoints) the fold's own."""
    key = hashlib.sha256(f"{plan.splits.content_key} fold {fold}/{folds}".encode()).hexdigest()[:16]
    splits = dataclasses.replace(plan.splits, content_key=key, train_split=None)
    return dataclasses.replace(plan, data=dataclasses.replace(plan.data, fold=(fold, folds)), splits=splits)


@dataclass(frozen=True)
class FoldEvidence:
    """What cross-fitting measured: each candidate's counts pooled over the folds (on the train
    samples the old model never trained on), the folds trained of how many, the trainings and
    their seconds."""

    trained: int
    folds: int
    pooled: dict[str, PairedCounts]
    trainings: int
    seconds: float


@dataclass(frozen=True)
class Fold:
    """Fold k's plan, each candidate's plan in it and its training job (teachers in process)."""

    plan: Plan
    plans: dict[str, Plan]
    jobs: list[TrainJob]


def cut_fold(plan: Plan, fold: int, folds: int, names: Sequence[str]) -> Fold:
    """Fold `fold` of `folds` for the candidates `names`: its plan, theirs, and their training jobs."""
    assert plan.auto is not None
    planned = fold_plan(plan, fold, folds)
    plans = {c.name: planned.candidate(c) for c in plan.auto.candidates if c.name in names}
    jobs = [
        dataclasses.replace(p.student_job(teachers=p.teacher_groups([]) or None), name=f"fold-{fold + 1}-{name}")
        for name, p in plans.items()
    ]
    return Fold(planned, plans, jobs)


def old_training_ids(plan: Plan) -> np.ndarray | None:
    """The ids of the samples the old model trained on: the training split of its registered run's
    spec, re-read; None when `old` is a checkpoint file or its data cannot be read as held splits."""
    from orchestrator.tracking import registry, runs
    from workers.data.dataset_splits import ImageSet, TextSet
    from workers.errors import DataError
    from workers.tasks.resolve import cached_splits

    if plan.old.parent is None:
        return None
    try:
        train = cached_splits(data_request(runs.spec_of(registry.run_of(plan.old.parent)))).train
    except (DataError, OSError):
        return None
    return train.ids.numpy() if isinstance(train, ImageSet | TextSet) else None


def fold_counts(
    fold: Fold, trained: dict[str, TrainRecord], bcwi: BcwiRecord | None, plan: Plan, unseen: np.ndarray
) -> dict[str, PairedCounts]:
    """One fold's counts against its no treatment, on its samples among `unseen` (train samples the
    old model never trained on)."""
    assert plan.spec.old is not None
    checkpoints = {"old": plan.spec.old, **{n: r.checkpoint for n, r in trained.items() if n != "bcwi"}}
    val = split_predictions(fold.plan, checkpoints, split="val")
    classes = dict(val.classes)
    if bcwi is not None and bcwi.held_out_classes is not None:
        classes["bcwi"] = np.array([bcwi.held_out_classes[int(i)] for i in val.ids], np.int64)
    known_classes = plan.old.classes
    known = np.ones(len(val.labels), bool) if known_classes is None else np.isin(val.labels, known_classes)
    counted = np.isin(val.ids, unseen)
    old, none, labels = classes["old"][counted], classes["none"][counted], val.labels[counted]
    return {name: PairedCounts.of(old, none, classes[name][counted], labels, known[counted]) for name in trained}


def unseen_train_ids(plan: Plan) -> np.ndarray | None:
    """The train split's ids the old model never trained on (None: its training rows are unknown)."""
    from workers.tasks.resolve import cached_splits

    old_trained = old_training_ids(plan)
    if old_trained is None:
        return None
    train = cached_splits(plan.data).train.ids.numpy()
    return train[~np.isin(train, old_trained)]


def cross_fit(
    plan: Plan, trained_folds: int, folds: int, names: Sequence[str], unseen: np.ndarray, watch: StageWatch
) -> FoldEvidence:
    """Train, predict and count the first `trained_folds` of `folds` folds (module docstring): every
    candidate of `names` on each, submitted at once (side by side as the CPUs allow), then each
    fold's bcwi α and counts on its samples among `unseen`; the pooled counts carry the design
    effect of J of K folds."""
    started = time.perf_counter()
    limit = plan.spec.method.max_er_increase
    cut = [cut_fold(plan, k, folds, names) for k in range(trained_folds)]
    records = iter(train_students(plan, watch, None, [job for fold in cut for job in fold.jobs]))
    pooled: dict[str, PairedCounts] = {}
    for k, fold in enumerate(cut):
        trained = {name: next(records) for name in fold.plans}
        bcwi = None
        if "bcwi" in trained:
            held = bcwi_held_to(fold.plans["bcwi"], trained["none"].val_error_rate, limit, trained["bcwi"])
            bcwi = run_bcwi(held, trained["bcwi"])
        for name, counts in fold_counts(fold, trained, bcwi, plan, unseen).items():
            pooled[name] = counts if name not in pooled else pooled[name] + counts
        watch.say(f"auto: fold {k + 1} of {trained_folds} counted ({', '.join(trained)})")
    effect = corrected_resampled_effect(trained_folds, folds)
    pooled = {name: dataclasses.replace(c, design_effect=effect) for name, c in pooled.items()}
    seconds = time.perf_counter() - started
    return FoldEvidence(trained_folds, folds, pooled, trained_folds * len(cut[0].plans), seconds)
