"""Preflight: every check a spec needs before any Ray work, run in one order (CHECKS), each problem
found reported at once, one line each, named by the field it concerns. Each check is a module of
facts/: a function from what the checks before it found to its own fact, or its problems.

`find(spec, settle_inputs=False)` runs them for `congruent check` (no Ray, no training, no tokenizer
trained unless a check needs it); `preflight(spec)` runs the same ones for `congruent run`, `tune` and
`demo`, with what the models read settled (the tokenizer trained), and builds the `Plan` from their
facts (`plan_of`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from orchestrator.planning.facts import (
    architecture,
    auto_candidates,
    data,
    init_file,
    init_fit,
    inputs,
    old_answers,
    old_fit,
    old_model,
    old_version,
    protected_training,
    shared_eval,
    slices,
    source,
    storage,
    stream_support,
)
from orchestrator.planning.facts.kinds import (
    AutoCandidates,
    Check,
    Data,
    Found,
    InitFile,
    ModelInputs,
    OldAnswers,
    OldFit,
    OldModel,
    OldVersion,
    Shape,
    Source,
)
from orchestrator.planning.facts.old_answers import class_names
from orchestrator.planning.model_inputs import directory_digest
from orchestrator.planning.plan import ForeignOld, ModelStart, Plan, PlannedOld, PlannedSplits
from pipelines.auto import CROSS_FIT_AUTO_SECONDS, cross_fits
from pipelines.spec import SpecError, UpdateSpec
from workers.names import HF_PREFIX, UNLABELLED_OBJECTIVES, is_hf
from workers.percent import short_percent

Fact = TypeVar("Fact")

# In this order: a check reads the facts of those before it (facts/__init__.py says what each finds)
CHECKS: tuple[Check, ...] = (
    old_version.check,
    architecture.check,
    source.check,
    protected_training.check,
    data.check,
    stream_support.check,
    old_answers.check,
    old_model.check,
    old_fit.check,
    auto_candidates.check,
    init_file.check,
    inputs.check,
    init_fit.check,
    shared_eval.check,
    slices.check,
    storage.check,
)


def find(spec: UpdateSpec, settle_inputs: bool = True, upcoming: Mapping[str, Shape] | None = None) -> Found:
    """Every check of CHECKS in turn, each on the facts found before it; the problems of all.
    `settle_inputs` False (`congruent check`): what the models read is settled only where a check
    needs it. `upcoming`: the versions specs checked before this one will register, by
    `MODEL@ALIAS` — an `old` naming one is checked against that spec instead of the registry."""
    found = Found(spec, settle_inputs, upcoming or {})
    for check in CHECKS:
        outcome = check(found)
        if outcome is not None:
            found = found.after(outcome)
    return found


def shape_of(found: Found) -> Shape | None:
    """The Shape of the version the spec registers, when its data could be read."""
    loaded = found.get(Data)
    return None if loaded is None else loaded.shape(found.settled.arch)


def preflight(spec: UpdateSpec) -> Plan:
    """Every check that needs the data, the old checkpoint, the registry or the storage, before any
    Ray work — SpecError listing every problem found, one line each, when the spec cannot run —
    and the Plan of a spec that can."""
    found = find(spec)
    if found.problems:
        raise SpecError(*found.problems)
    return plan_of(found)


def plan_of(found: Found) -> Plan:
    """The Plan of a spec whose checks found no problem, from their facts."""
    from workers.tasks.resolve import content_key

    spec, request, splits = found.settled, found.request, _needed(found, Data).splits
    assert request is not None, "preflight found no problem, so it opened the source"
    old, fit = found.get(OldVersion), found.get(OldFit)
    old_model, init = found.get(OldModel), _needed(found, InitFile)
    auto = found.get(AutoCandidates)
    unlabelled = splits.unlabelled
    return Plan(
        spec,
        request,
        PlannedSplits(
            content_key(request),
            splits.fingerprint,
            splits.num_classes,
            tuple(splits.train.classes),
            splits.eval.labels.numpy(),
            # what the students distil on, held by the teacher pool (auto: its distilling candidates')
            splits.distillation_split if spec.method.name in (*UNLABELLED_OBJECTIVES, "auto") else splits.train,
            None if unlabelled is None else (len(unlabelled), splits.unlabelled_dropped),
            None if request.protected is None else (splits.protected_trained, splits.protected_left_out),
        ),
        PlannedOld()
        if old is None
        else PlannedOld(
            old.parent,
            old.written,
            None if fit is None else fit.classes,
            None if auto is None else auto.bcwi_inputs,
            foreign_old(found),
        ),
        ModelStart(
            _needed(found, ModelInputs).inputs,
            old_model.digest if spec.init == "old" and old_model is not None else init.key,
            directory_digest(spec.arch.removeprefix(HF_PREFIX)) if is_hf(spec.arch) else None,
        ),
        None if auto is None else auto.choice,
        (0, 0) if auto is None or auto.folds is None else (auto.folds.trained, auto.folds.folds),
    )


def foreign_old(found: Found) -> ForeignOld | None:
    """The plan's record of a foreign old model (None: the old model is Congruent's, or there is none)."""
    old, answers = found.get(OldVersion), found.get(OldAnswers)
    if old is None or old.foreign is None or answers is None:
        return None
    splits = _needed(found, Data).splits
    return ForeignOld(old.foreign.uri, answers.column, class_names(splits.eval.classes, splits.num_classes))


def fold_line(auto: AutoCandidates) -> str:
    """What cross-fitting will train (`method.cross_fit`), and what it costs."""
    assert auto.folds is not None
    j, k = auto.folds.trained, auto.folds.folds
    names = [c.name for c in auto.choice.candidates if cross_fits(c)]
    when = (
        f" when no treatment trains in ≤ {CROSS_FIT_AUTO_SECONDS:.0f} s and a candidate's val figures leave the"
        " folds a chance to prove it (cross_fit auto)"
        if auto.folds.conditional
        else ""
    )
    at_most = " at most" if auto.choice.stops or auto.folds.conditional else ""
    return (
        f"auto cross-fits {', '.join(names)} on {j} of {k} folds of train ∪ val ({auto.folds.labelled:,} labelled "
        f"samples){when}: {j * len(names)} more trainings{at_most}, each on the other folds (as many samples as the "
        f"shipped model), and tests them on the {j} folds' samples the old model never trained on, with val's"
    )


def _needed(found: Found, kind: type[Fact]) -> Fact:
    fact = found.get(kind)
    assert fact is not None, f"preflight found no problem, so it found {kind.__name__}"
    return fact


def summary(found: Found) -> str:
    """One line: what the spec will train, on what (and how many corrupt files it leaves out), from
    which old version."""
    spec, splits = found.settled, _needed(found, Data).splits
    streamed = _needed(found, Source).request.streamed
    skipped = len(streamed.skipped) if streamed is not None else 0
    old = found.get(OldVersion)
    method = spec.method.name + (f" (m {spec.method.m})" if spec.method.name in ("elodi", "ensemble") else "")
    sizes = f"{len(splits.train):,} train / {len(splits.val):,} val / {len(splits.eval):,} eval"
    data_line = f"{sizes} {splits.modality} samples, {splits.num_classes} classes"
    if skipped:
        data_line += f" ({skipped:,} corrupt file{'s' if skipped > 1 else ''} left out)"
    if splits.unlabelled is not None:
        data_line += f", and {len(splits.unlabelled):,} unlabelled texts ({splits.unlabelled_dropped:,} left out)"
    if spec.train.protected_weight is not None:
        data_line += (
            f"; {splits.protected_trained:,} protected samples in train ×{spec.train.protected_weight} "
            f"({splits.protected_left_out:,} of val or eval left out)"
        )
    old_line = f"old {old.written}" if old is not None else "no old version (a first version)"
    if old is not None and old.foreign is not None:
        old_line += f" ({old.foreign.uri}, a model outside Congruent: its answers only)"
    line = f"{spec.model} {spec.version}: {method}, {spec.arch}; {data_line}; {old_line}"
    auto = found.get(AutoCandidates)
    if auto is not None:
        limit = f"the upper 95% bound of val ER − no treatment's ≤ {100 * spec.method.max_er_increase:+g} pt"
        # how much evidence one sample is: on a small val split a candidate wins or loses by a flip or two
        n_val = len(splits.val)
        grain = f"the val split's {n_val:,} samples: one flip or error there is {100 / max(1, n_val):.2g} pt"
        order = " → ".join(c.name for c in auto.choice.candidates[1:])
        line += (
            "\n"
            + "\n".join(auto.choice.lines())
            + f"\nauto tests {order} in that order, stopping at the first that fails, and ships the largest NFR "
            + f"cut among those proven ({limit}, NFR proven lower; {grain}); else no treatment"
        )
        if auto.folds is not None:
            line += "\n" + fold_line(auto)
        gate = spec.promote
        if gate is not None and gate.max_slice_nfr is not None:
            nfr = "NFR upper bound" if gate.confidence else "NFR"
            line += (
                f"\nand no val slice of {gate.min_slice_n}+ samples with {nfr} above "
                f"{short_percent(gate.max_slice_nfr)} (promote.max_slice_nfr)"
            )
    return line
