"""The evaluation stage: the model, the old model and the ensemble paragon on the regression-eval
split, streamed. One Ray task (`resources.student`) reads the split once and sends each chunk's
logits as it has them (a Ray streaming generator, `bodies.eval_chunks`), with the samples' ids and
labels as the split read them (a stream: from the shards, so labels travel with their samples); the
driver writes each chunk into memory-mapped predictions/*.npy files (ids.npy and labels.npy beside
them) and counts ER, NFR and PFR over the chunks. No process holds an N×C array.

The same task then computes what publish records of the model beside its ledger's logits
(`VersionRecords`): the eval samples' slice values, read from the source, its answers on the
model's protected set, and the registry's copy of its checkpoint; the driver only writes them."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import ray

from orchestrator.dataplane.slice_reads import SliceSource, sample_slice_values
from orchestrator.execution.stages import stage_task
from orchestrator.execution.watch import StageWatch
from orchestrator.planning.plan import Plan
from orchestrator.planning.resources import device
from orchestrator.tracking.protected import ProtectedSet, protected_set
from orchestrator.views.format import percent
from workers.metrics import EvaluationMetrics, FlipCounts, class_ids
from workers.models.protected_scoring import protected_answers
from workers.progress import ProgressEvent
from workers.tasks.bodies import EvalChunk, eval_chunks, registry_checkpoint
from workers.tasks.records import DataRequest

STREAM_BACKLOG = 2  # chunks the evaluation task may have sent ahead of the driver
EVALUATION = "evaluation"  # the stage's name on the progress display and in Ray's task table

# each comparison of EvaluationMetrics: (old, new, on the old model's classes only)
COMPARISONS = {
    "vs_old": ("old", "new", True),
    "vs_old_all_classes": ("old", "new", False),
    "vs_paragon": ("paragon", "new", False),
    "paragon_vs_old": ("old", "paragon", True),
}


@dataclass(frozen=True)
class RecordRequest:
    """What publish records of the evaluated model beyond its logits, asked of the evaluation task:
    the eval samples' slice values (from `slices`), and for a model of its own (not the ensemble's
    paragon) the registry's copy of its checkpoint (with the eval split's `fingerprint`) and its
    answers on the protected set's inputs (`protected_inputs`, an image set's `protected_images`)."""

    slices: SliceSource
    fingerprint: str
    protected_inputs: tuple[str, ...] | None = None
    protected_images: tuple[bytes | None, ...] | None = None


@dataclass
class VersionRecords:
    """What the evaluation task computed for publish: the eval samples' slice values in the order of
    the predictions (None: the spec names no slices); with a model of its own, the registry's copy
    of its checkpoint (the bytes of a model.pt: `bodies.registry_checkpoint`) and, when the model
    has a protected set (`protected`, read before the task), its answers on it."""

    slice_values: dict[str, np.ndarray] | None = None
    registry_checkpoint: bytes | None = None
    protected: ProtectedSet | None = None
    protected_answers: np.ndarray | None = None


@dataclass
class Evaluation:
    """The model against the old version and the paragon on the regression-eval split; the
    predictions (.npy logits) reproduce every number with `congruent compare`."""

    metrics: EvaluationMetrics
    predictions: dict[str, str]  # new, old, paragon → .npy path
    labels: str
    n_eval: int
    ids: str = ""  # the samples' ids (.npy), in the order of the predictions
    records: VersionRecords | None = None  # what publish records beside them (`evaluate` only)


@dataclass
class EvaluationTally:
    """ER and the comparisons of `COMPARISONS` counted over chunks of the eval split (global
    counts: a rate is its count over every sample, never a mean of chunks' rates).
    `vs_old_all_classes` only with `all_classes` (the old model knows fewer classes)."""

    all_classes: bool = False
    n: int = 0
    errors: int = 0
    pairs: dict[str, FlipCounts] = field(default_factory=dict)

    def add(self, logits: Mapping[str, np.ndarray], labels: np.ndarray, known: np.ndarray) -> None:
        """One chunk: logits (or class ids) by name ("new", and "old", "paragon" where evaluated),
        its labels and which of its samples are of the old model's classes."""
        ids = {name: class_ids(values) for name, values in logits.items()}
        self.n += len(labels)
        self.errors += int(np.count_nonzero(ids["new"] != labels))
        for key, (old, new, on_known) in COMPARISONS.items():
            if old not in ids or new not in ids or (key == "vs_old_all_classes" and not self.all_classes):
                continue
            keep = known if on_known else np.ones(len(labels), bool)
            counts = FlipCounts.of(ids[old][keep], ids[new][keep], labels[keep])
            self.pairs[key] = self.pairs.get(key, FlipCounts()) + counts

    def metrics(self) -> EvaluationMetrics:
        if self.n == 0:
            raise ValueError("metrics are undefined on an empty set (N = 0)")
        metrics: EvaluationMetrics = {"error_rate": self.errors / self.n}
        for key, counts in self.pairs.items():
            metrics[key] = counts.report()  # type: ignore[literal-required]
        return metrics


def evaluation_task(
    checkpoints: Mapping[str, str],
    data: DataRequest,
    device: str,
    allow_user_factories: bool,
    ensemble: Sequence[str],
    split: str,
    request: RecordRequest | None = None,
) -> Iterator[EvalChunk | VersionRecords]:
    """The evaluation's Ray task: `bodies.eval_chunks`' chunks as they come; with `request`, last,
    the VersionRecords of the model "new" (none without one: the ensemble's paragon)."""
    ids: list[np.ndarray] = []
    for chunk in eval_chunks(checkpoints, data, device, allow_user_factories, ensemble, split):
        if request is not None:
            ids.append(np.array(chunk.ids))
        yield chunk
    if request is None:
        return
    records = VersionRecords(sample_slice_values(np.concatenate(ids) if ids else np.zeros(0, np.int64), request.slices))
    if "new" in checkpoints:
        records.registry_checkpoint = registry_checkpoint(checkpoints["new"], request.fingerprint, allow_user_factories)
        if request.protected_inputs is not None:
            records.protected_answers = protected_answers(
                checkpoints["new"], request.protected_inputs, allow_user_factories, request.protected_images
            )
    yield records


def stream_eval_chunks(
    plan: Plan,
    checkpoints: Mapping[str, str],
    ensemble: Sequence[str] = (),
    split: str = "eval",
    request: RecordRequest | None = None,
) -> Iterator[EvalChunk | VersionRecords]:
    """{name: logits} with the samples' ids and labels, chunk by chunk, in the eval split's order
    (or `split`'s: "val"), from one Ray task
    (`resources.student`) that streams them (at most STREAM_BACKLOG chunks ahead); "paragon"
    with `ensemble`; with `request`, last, the VersionRecords it asks (`evaluation_task`). A lost
    worker's task is retried: Ray replays the stream."""
    res = plan.spec.resources.student
    task = stage_task(evaluation_task, plan.spec.resources).options(
        num_cpus=res.cpus,
        num_gpus=res.gpus,
        max_retries=2,
        name=EVALUATION,
        num_returns="streaming",
        _generator_backpressure_num_objects=STREAM_BACKLOG,
    )
    stream = task.remote(
        dict(checkpoints), plan.data, device(res.gpus), plan.spec.allow_user_factories, list(ensemble), split, request
    )
    for ref in stream:
        chunk = ray.get(ref)
        del ref  # no reference pins the object once the chunk is used
        yield chunk


@dataclass
class SplitPredictions:
    """Each model's class ids on a split, with the split's sample ids and labels, in its order."""

    classes: dict[str, np.ndarray]
    ids: np.ndarray
    labels: np.ndarray


def split_predictions(
    plan: Plan, checkpoints: Mapping[str, str], ensemble: Sequence[str] = (), split: str = "eval"
) -> SplitPredictions:
    """{name: N int64 class ids} of `stream_eval_chunks` ("paragon" with `ensemble`), each chunk's
    argmax taken as it comes, so no N×C array is held: 8 bytes a sample and model, for callers that
    score several models against each other (Tune's search, auto, the demo's verdict)."""
    classes: dict[str, list[np.ndarray]] = {}
    ids, labels = [], []
    for chunk in stream_eval_chunks(plan, checkpoints, ensemble, split):
        assert isinstance(chunk, EvalChunk), "a stream without a request sends chunks only"
        for name, logits in chunk.logits.items():
            classes.setdefault(name, []).append(class_ids(logits))
        ids.append(chunk.ids)
        labels.append(chunk.labels)
    empty = np.zeros(0, np.int64)
    return SplitPredictions(
        {name: np.concatenate(parts) for name, parts in classes.items()},
        np.concatenate(ids) if ids else empty,
        np.concatenate(labels) if labels else empty,
    )


def eval_split_predictions(
    plan: Plan, checkpoints: Mapping[str, str], ensemble: Sequence[str] = ()
) -> dict[str, np.ndarray]:
    """{name: N int64 class ids} on the regression-eval split (`split_predictions`)."""
    return split_predictions(plan, checkpoints, ensemble).classes


def record_request(plan: Plan, checkpoint: str | None) -> tuple[RecordRequest, ProtectedSet | None]:
    """What `evaluate` asks the evaluation task for publish (`RecordRequest`), and the model's
    protected set whose inputs it holds (None: no set, an empty one, or no model of its own)."""
    suite = protected_set(plan.spec.model) if checkpoint is not None else None
    suite = suite if suite is not None and len(suite) else None
    request = RecordRequest(
        SliceSource.of(plan.spec.data),
        plan.splits.eval_fingerprint,
        None if suite is None else tuple(suite.inputs),
        None if suite is None or suite.images is None else tuple(suite.images),
    )
    return request, suite


def write_chunk(
    files: dict[str, np.ndarray], folder: Path, start: int, chunk: EvalChunk, logits: dict[str, np.ndarray]
) -> int:
    """The chunk's ids, labels and `logits` into the memory-mapped `files` (each model's opened in
    `folder` at its first chunk) from row `start`; the row after it."""
    n = len(files["ids"])
    window = slice(start, start + len(chunk))
    if window.stop > n:
        raise RuntimeError(f"the evaluation sent more samples than the {n} of the eval split")
    files["ids"][window], files["labels"][window] = chunk.ids, chunk.labels
    for name in sorted(logits, key=["new", "old", "paragon"].index):
        if name not in files:
            path = folder / f"{name}.npy"
            files[name] = np.lib.format.open_memmap(path, "w+", np.float32, (n, logits[name].shape[1]))
        files[name][window] = logits[name]
    return window.stop


def evaluate(
    plan: Plan, checkpoint: str | None, ensemble: Sequence[str], run_dir: Path, watch: StageWatch | None = None
) -> Evaluation:
    """Logits of the model (without one, the ensemble method: the paragon of `ensemble`), the old
    model and the paragon of `ensemble` on the regression-eval split, written chunk by chunk into
    predictions/{new,old,paragon}.npy under `run_dir` (with the samples' ids.npy and labels.npy, as
    the evaluation read them), the metrics counted over the chunks, and what publish records beside
    them (`VersionRecords`, from the same task); `watch` shows the samples evaluated so far."""
    checkpoints = {name: uri for name, uri in (("new", checkpoint), ("old", plan.spec.old)) if uri is not None}
    assert checkpoint is not None or ensemble, "an evaluation needs a model or an ensemble"
    n = len(plan.splits.eval_labels)  # the scan's count: a stream that gives another fails below
    folder = run_dir / "predictions"
    folder.mkdir(parents=True, exist_ok=True)
    files: dict[str, np.ndarray] = {
        "ids": np.lib.format.open_memmap(folder / "ids.npy", "w+", np.int64, (n,)),
        "labels": np.lib.format.open_memmap(folder / "labels.npy", "w+", np.int64, (n,)),
    }
    tally = EvaluationTally(all_classes=plan.old.classes is not None)
    request, suite = record_request(plan, checkpoint)
    records = None
    done, started = 0, time.perf_counter()
    display = (watch or StageWatch()).display
    display.add(EVALUATION)
    for chunk in stream_eval_chunks(plan, checkpoints, ensemble, "eval", request):
        if isinstance(chunk, VersionRecords):
            records = replace(chunk, protected=suite)
            continue
        logits = dict(chunk.logits)
        if checkpoint is None:
            logits["new"] = logits.pop("paragon")
        done = write_chunk(files, folder, done, chunk, logits)
        # flips against the old model count on the classes it knows (data growth with new classes)
        known = np.ones(len(chunk), bool) if plan.old.classes is None else np.isin(chunk.labels, plan.old.classes)
        tally.add(logits, chunk.labels, known)
        rate = done / max(time.perf_counter() - started, 1e-9)
        display.update(ProgressEvent(EVALUATION, 1, 1, done, n, samples_per_second=rate))
    if done != n:
        raise RuntimeError(f"the evaluation sent {done} samples' logits of {n}")
    for memmap in files.values():
        memmap.flush()  # type: ignore[attr-defined]
    metrics = tally.metrics()
    seconds = time.perf_counter() - started
    display.finish(EVALUATION, f"ER {percent(metrics['error_rate'])} on {done:,} samples, {seconds:.0f} s")
    predictions = {name: str(folder / f"{name}.npy") for name in files if name not in ("ids", "labels")}
    return Evaluation(metrics, predictions, str(folder / "labels.npy"), n, str(folder / "ids.npy"), records)
