"""What an update pipeline returns and how it is published: `PipelineResult`, the registry's
`version_record`, and `publish` (MLflow's nested runs, the evaluation, the ledger, the registry
version, the promotion gate) — shared by `run` (pipeline.py), method auto (auto.py) and `tune`.

Publish only writes records: what it records beyond the stages' own (the eval samples' slice
values, the registry's copy of the checkpoint, the answers on the protected set) the evaluation
task computed (execution/evaluation.py `VersionRecords`)."""

from __future__ import annotations

import json
import tempfile
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from orchestrator.execution.evaluation import Evaluation, VersionRecords
from orchestrator.execution.watch import StageWatch
from orchestrator.planning.plan import Plan, adapter_of
from orchestrator.tracking import promotion, protected, registry, runs
from orchestrator.tracking.ledger import LEDGER_FILE, write_ledger
from orchestrator.tracking.tags import PROMOTION
from orchestrator.tracking.version_record import VersionRecord
from pipelines.spec import UpdateSpec
from workers.metrics import EvaluationMetrics
from workers.models.protected_scoring import protected_answers
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
    auto: dict[str, Any] | None = None  # method auto: its AutoRecord (driver/auto.py)
    records: VersionRecords | None = None  # what the evaluation computed for publish (not in result.json)

    def to_json(self) -> str:
        """result.json: every field but `records` (arrays and a checkpoint's bytes, written elsewhere)."""
        record = asdict(replace(self, records=None))
        del record["records"]
        return json.dumps(record, indent=2)


def pipeline_result(
    plan: Plan,
    evaluation: Evaluation,
    checkpoint: str | None,
    run_id: str | None,
    spec: UpdateSpec | None = None,
    **stages: Any,
) -> PipelineResult:
    """The result of `plan`'s run: its spec's names (`spec`'s where given: a tune trial's), its
    evaluation of `checkpoint`, and what the stages recorded (`stages`: replicas, student,
    teacher_pool, bcwi, seconds, auto)."""
    method = plan.method if spec is None else spec.method.name
    spec = spec or plan.spec
    return PipelineResult(
        model=spec.model,
        version=spec.version,
        method=method,
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
        run_id=run_id,
        records=evaluation.records,
        **stages,
    )


def auto_summary(auto: dict[str, Any]) -> list[dict[str, Any]]:
    """Each of auto's candidates as the registry keeps it: name, val and eval ER and NFR, its val ER
    and NFR changes against no treatment with their upper bounds (the report draws them), whether the
    fixed order tested and proved it, seconds, and its val slice over the slice gate where it had one."""
    val = ("val_error_rate", "val_nfr", "val_er_change", "val_er_upper", "val_nfr_change", "val_nfr_upper")
    keys = ("name", *val, "tested", "eligible", "error_rate", "nfr", "seconds")
    over = "val_slice_over"
    return [{k: c[k] for k in keys} | ({over: c[over]} if c.get(over) else {}) for c in auto["candidates"]]


def log_data_counts(plan: Plan) -> None:
    """With data.unlabelled, the texts kept and left out (metrics data.unlabelled, data.unlabelled_dropped);
    with train.protected_weight, the protected samples trained on and left out (data.protected_trained,
    data.protected_left_out) and the set's version (param protected_set); with data.skip_corrupt, how
    many files preflight left out (metric data.skipped_corrupt) and which (artifact data/skipped_corrupt.txt)."""
    if plan.splits.unlabelled is not None:
        runs.log_metrics(
            "data.", {"unlabelled": plan.splits.unlabelled[0], "unlabelled_dropped": plan.splits.unlabelled[1]}
        )
    if plan.splits.protected is not None and plan.data.protected is not None:
        trained, left_out = plan.splits.protected
        runs.log_metrics("data.", {"protected_trained": trained, "protected_left_out": left_out})
        runs.log_params({"protected_set": str(plan.data.protected.version)})
    data = plan.data
    if not data.skip_corrupt or data.streamed is None:
        return
    skipped = data.streamed.skipped
    runs.log_metrics("data.", {"skipped_corrupt": len(skipped)})
    if skipped:
        runs.log_text("".join(f"{name}\n" for name in skipped), "data/skipped_corrupt.txt")


def version_record(
    spec: UpdateSpec, plan: Plan, metrics: EvaluationMetrics, auto: dict[str, Any] | None = None
) -> VersionRecord:
    """What the registry records of a version: lineage, method, eval split, ER and flips against its
    parent, class names; with method auto, the candidate chosen and every candidate's figures. A
    first version has no `parent_version` and `old`; without an old model there are no `nfr` /
    `pfr` / `rel_nfr` (and no `rel_nfr` where it is undefined)."""
    vs_old = metrics.get("vs_old", {})
    return VersionRecord(
        chosen=auto["chosen"] if auto else "",
        candidates=tuple(auto_summary(auto)) if auto else (),
        method=spec.method.name,
        arch=spec.arch,
        label=spec.version,
        fingerprint=plan.splits.eval_fingerprint,
        spec_hash=spec.spec_hash,
        base_digest=plan.start.arch_key or "",
        adapter=adapter.summary if (adapter := adapter_of(spec)) else "",
        error_rate=metrics["error_rate"],
        parent_version=plan.old.parent.version if plan.old.parent else None,
        old=old_of(plan, spec),
        foreign_parent=plan.old.foreign.uri if plan.old.foreign else None,
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
    log_stages(plan, result, spec)
    runs.log_evaluation(result.metrics, run_dir / "predictions")
    runs.log_file(log_ledger(result, run_dir), "ledger")
    if plan.old.foreign is not None and "old" in result.predictions:  # the foreign old has no ledger of its own
        runs.log_file(log_parent_ledger(plan, result, run_dir), "ledger/parent")
    if result.checkpoint is not None:
        register_version(plan, result, spec, watch)
    if spec.promote is not None and result.registered_version is not None:
        verdict = promotion.promote(
            spec.model,
            result.registered_version,
            spec.promote,
            score=partial(protected_answers, allow_user_factories=spec.allow_user_factories),
        )
        result.promotion = {"passed": verdict.passed, "reason": verdict.reason}
        runs.set_tags({PROMOTION: ("champion: " if verdict.passed else "rejected: ") + verdict.reason})
    (run_dir / "result.json").write_text(result.to_json())
    runs.log_file(run_dir / "result.json")


def old_of(plan: Plan, spec: UpdateSpec) -> str | None:
    """What the registry records as the version's old model: a registry reference as written, a
    foreign model's resolved URI (models:/NAME/VERSION), else the checkpoint's path."""
    if plan.old.foreign is not None:
        return plan.old.foreign.uri
    return plan.old.written if plan.old.parent else spec.old


def log_stages(plan: Plan, result: PipelineResult, spec: UpdateSpec) -> None:
    """What the stages recorded: a nested run per trained model, the teacher pool's and BCWI's
    figures, each stage's seconds."""
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
        runs.log_bcwi(result.bcwi.alpha, result.bcwi.sweep, result.bcwi.held_out)
    runs.log_metrics("seconds.", result.seconds)


def log_ledger(result: PipelineResult, run_dir: Path) -> Path:
    """The version's ledger (tracking/ledger.py) under `run_dir`/ledger: its eval predictions, with
    the slice values the evaluation read (`VersionRecords`); its path."""
    (run_dir / "ledger").mkdir(exist_ok=True)
    trained = result.bcwi or result.student
    return write_ledger(
        run_dir / "ledger" / LEDGER_FILE,
        np.load(result.predictions["new"], mmap_mode="r"),  # read by the ledger in blocks
        np.load(result.labels),
        np.load(result.ids),
        result.fingerprint,
        trained.classes_seen if trained else None,
        result.records.slice_values if result.records is not None else None,
    )


def log_parent_ledger(plan: Plan, result: PipelineResult, run_dir: Path) -> Path:
    """The ledger of a foreign old model (ledger_files.py: the registry reads it as that version's)
    under `run_dir`/ledger/parent: its answers on the eval split, the table's logits."""
    (run_dir / "ledger" / "parent").mkdir(parents=True, exist_ok=True)
    return write_ledger(
        run_dir / "ledger" / "parent" / LEDGER_FILE,
        np.load(result.predictions["old"], mmap_mode="r"),
        np.load(result.labels),
        np.load(result.ids),
        result.fingerprint,
        None if plan.old.classes is None else list(plan.old.classes),
    )


def register_version(plan: Plan, result: PipelineResult, spec: UpdateSpec, watch: StageWatch) -> None:
    """The registry version of `spec` (once: a rerun finds it) from the registry's copy of the
    checkpoint the evaluation wrote, and its figures on the model's protected set."""
    records = result.records
    assert records is not None and records.registry_checkpoint is not None, "evaluate gives a model's records"
    with tempfile.TemporaryDirectory(prefix="congruent-registry-") as folder:
        checkpoint = Path(folder, "model.pt")
        checkpoint.write_bytes(records.registry_checkpoint)
        version, new = registry.register_once(
            spec.model,
            str(checkpoint),
            version_record(spec, plan, result.metrics, result.auto),
            spec.allow_user_factories,
            spec.data.text_column,  # what the registered pyfunc model reads a text model's inputs from
        )
    watch.say(
        f"registered {spec.model} version {version} (alias challenger)"
        if new
        else f"{spec.model} version {version} already holds spec {spec.spec_hash}: not registered again"
    )
    result.registered_version = version
    log_protected(records, watch)


def log_protected(records: VersionRecords, watch: StageWatch) -> None:
    """The new version on the model's protected set (tracking/protected.py), beside its eval split:
    metrics protected.n, protected.correct and protected.set (none without a set)."""
    suite, answers = records.protected, records.protected_answers
    if suite is None or answers is None:
        return
    counts = protected.protected_counts(suite.labels, answers)
    runs.log_metrics("protected.", {"n": counts.n, "correct": counts.correct, "set": suite.version})
    watch.say(f"protected set {suite.version}: {counts.correct} of {counts.n} right")
