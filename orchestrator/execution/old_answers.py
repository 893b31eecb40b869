"""The old-answers stage of an update whose old model Congruent did not train (`old: models:/…` of
any MLflow classifier): that model's class probabilities on every distinct text the update reads
(train with its unlabelled texts, val, eval), scored once on Ray Data by actors that load its pyfunc,
written as the answer table `spec.old` names (workers/models/answer_table.py). Its name is the
model's resolved URI and the texts' digest, so a second update against the same model on the same
texts reads it from storage instead."""

from __future__ import annotations

import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import ray

from orchestrator.dataplane.ray_reading import ordered_context
from orchestrator.execution.watch import StageWatch
from orchestrator.planning.plan import Plan
from orchestrator.tracking import runs
from orchestrator.tracking.foreign_models import PyfuncProbabilities
from orchestrator.tracking.store import tracking_uri
from workers import storage
from workers.data.tokenizer import text_digest_words
from workers.errors import first_line
from workers.models.answer_table import DIGEST_INPUTS, AnswerTable, answer_logits
from workers.models.checkpoints import CheckpointError, ModelSettings, load_model, save_checkpoint
from workers.names import ANSWER_TABLE
from workers.tasks.resolve import cached_splits

BATCH_TEXTS = 1024  # texts a scoring call gives the pyfunc


@dataclass(frozen=True)
class OldAnswersRecord:
    """What the stage did: the texts the table holds, whether it was read from storage (`cached`),
    else the seconds Ray Data took to score them."""

    texts: int
    cached: bool
    seconds: float = 0.0

    @property
    def rows_per_s(self) -> float:
        return self.texts / self.seconds if self.seconds else 0.0

    def line(self, uri: str) -> str:
        if self.cached:
            return f"old answers: {self.texts:,} texts' answers of {uri} read from storage"
        return (
            f"old answers: {self.texts:,} texts scored by {uri} on Ray Data in {self.seconds:.1f} s "
            f"({self.rows_per_s:,.0f} texts/s)"
        )


def old_answers_stage(plan: Plan, watch: StageWatch) -> OldAnswersRecord | None:
    """`ensure_old_answers` inside the pipeline's MLflow run, its figures logged there
    (old_answers_texts, _cached, _seconds, _texts_per_s). None: no foreign old model."""
    record = ensure_old_answers(plan, watch)
    if record is not None:
        figures = {"texts": record.texts, "cached": float(record.cached), "seconds": record.seconds}
        runs.log_metrics("old_answers_", {**figures, "texts_per_s": record.rows_per_s})
    return record


def ensure_old_answers(plan: Plan, watch: StageWatch) -> OldAnswersRecord | None:
    """The answer table of the plan's foreign old model at `spec.old`: read when storage holds it
    (a stale or unreadable one is scored again), else scored and written. None: no foreign old."""
    foreign, uri = plan.old.foreign, plan.spec.old
    if foreign is None or uri is None:
        return None
    with tempfile.TemporaryDirectory(prefix="old-answers-") as scratch:
        local = Path(scratch) / "answers.pt"
        if storage.download(uri, local):
            try:
                table, _ = load_model(local)
                record = OldAnswersRecord(len(table.keys), cached=True)  # type: ignore[arg-type]
                watch.say(record.line(foreign.uri))
                return record
            except CheckpointError as e:
                watch.say(f"old answers: the stored table is unreadable ({first_line(e)}); scoring again")
        splits = cached_splits(plan.data)
        texts = sorted({t for part in (splits.distillation_split, splits.val, splits.eval) for t in part.texts})  # type: ignore[attr-defined]
        started = time.perf_counter()
        answered, probabilities = score_texts(texts, foreign.uri, foreign.column, foreign.classes)
        record = OldAnswersRecord(len(answered), cached=False, seconds=time.perf_counter() - started)
        table = AnswerTable.of(text_digest_words(answered), answer_logits(probabilities))
        settings = ModelSettings(ANSWER_TABLE, len(foreign.classes), DIGEST_INPUTS)
        save_checkpoint(local, table, settings, foreign_uri=foreign.uri)
        storage.upload(local, uri)
    watch.say(record.line(foreign.uri))
    return record


def score_texts(texts: list[str], uri: str, column: str, classes: tuple[str, ...]) -> tuple[list[str], np.ndarray]:
    """`texts` with the model's N×C probabilities (in the order of `classes`), scored on Ray Data by
    one actor holding the model's pyfunc, BATCH_TEXTS texts a call."""
    ordered_context()  # in order, quiet, bounded in the object store, as every stream of the pipeline
    with warnings.catch_warnings():
        # Ray 2.60 takes max_restarts only as a remote argument, which it says it will stop taking in 2.64
        warnings.simplefilter("ignore", DeprecationWarning)
        dataset = ray.data.from_items([{"payload": text} for text in texts]).map_batches(
            PyfuncProbabilities,
            fn_constructor_kwargs={"uri": uri, "column": column, "classes": classes, "tracking_uri": tracking_uri()},
            batch_size=BATCH_TEXTS,
            compute=ray.data.ActorPoolStrategy(size=1),
            num_cpus=1,
            # no restarts: a restarted actor would need its constructor's arguments, which Ray keeps in
            # the object store and may have lost (ray#53727, which Ray says on the terminal of every run
            # that allows them); a lost actor fails the stage, which wrote nothing yet: a rerun scores again
            max_restarts=0,
        )
    answered: list[str] = []
    rows: list[np.ndarray] = []
    for batch in dataset.iter_batches(batch_size=BATCH_TEXTS, batch_format="numpy"):
        answered.extend(str(text) for text in batch["payload"])
        rows.append(np.asarray(batch["probabilities"], dtype=np.float64))
    if answered != texts:
        raise RuntimeError(f"the old model answered {len(answered)} texts of {len(texts)}, or others")
    return answered, np.concatenate(rows) if rows else np.zeros((0, len(classes)))
