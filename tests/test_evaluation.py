"""The evaluation streams: each model's logits come chunk by chunk from one pass over the eval
split with the samples' ids and labels, the metrics are counts summed over chunks, and the ledger
(written in blocks) is keyed by sample id, so two versions compare on the samples they share."""

from dataclasses import replace

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from orchestrator.execution.evaluation import EvaluationTally
from orchestrator.planning.preflight import preflight
from orchestrator.tracking import ledger as ledger_module
from orchestrator.tracking.ledger import (
    COMPARED,
    LedgerMismatch,
    chain_nfr_matrix,
    pair_counts,
    read_ledger,
    shared_samples,
    write_ledger,
)
from pipelines.spec import parse_spec
from workers.metrics import FlipCounts, nfr_matrix, update_report
from workers.tasks.bodies import EvalChunk

LABELS = np.array([0, 1, 2, 0, 1])
OLD = np.array([0, 1, 0, 0, 2])  # right, right, wrong, right, wrong
NEW = np.array([0, 2, 2, 1, 1])  # right, wrong, right, wrong, right


def test_flip_counts_are_hand_counted_and_chunks_add_up_to_the_whole():
    whole = FlipCounts.of(OLD, NEW, LABELS)
    assert whole == FlipCounts(n=5, old_errors=2, new_errors=2, negative=2, positive=2)
    assert FlipCounts.of(OLD[:2], NEW[:2], LABELS[:2]) + FlipCounts.of(OLD[2:], NEW[2:], LABELS[2:]) == whole
    report = whole.report()
    assert report == {"n": 5, "er_old": 0.4, "er_new": 0.4, "nfr": 0.4, "pfr": 0.4, "rel_nfr": 0.4 / (0.6 * 0.4)}
    assert update_report(OLD, NEW, LABELS) == report
    with pytest.raises(ValueError, match="empty"):
        FlipCounts().report()


def test_the_tally_over_chunks_equals_the_metrics_of_the_whole_split():
    """ER and every comparison of the evaluation counted chunk by chunk (uneven chunks, one with
    no sample of the old model's classes) equal `update_report` on the whole split."""
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 4, 101)
    ids = {name: np.where(rng.random(101) < 0.7, labels, rng.integers(0, 4, 101)) for name in ("new", "old", "paragon")}
    known = labels < 3
    tally = EvaluationTally(all_classes=True)
    for window in (slice(0, 3), slice(3, 40), slice(40, 101)):
        tally.add({k: v[window] for k, v in ids.items()}, labels[window], known[window])
    metrics = tally.metrics()
    assert metrics["error_rate"] == np.mean(ids["new"] != labels)
    assert metrics["vs_old"] == update_report(ids["old"][known], ids["new"][known], labels[known])
    assert metrics["vs_old_all_classes"] == update_report(ids["old"], ids["new"], labels)
    assert metrics["vs_paragon"] == update_report(ids["paragon"], ids["new"], labels)
    assert metrics["paragon_vs_old"] == update_report(ids["old"][known], ids["paragon"][known], labels[known])
    only_new = EvaluationTally()
    only_new.add({"new": ids["new"]}, labels, known)
    assert list(only_new.metrics()) == ["error_rate"]


def test_a_ledger_written_in_blocks_holds_what_the_whole_arrays_give(tmp_path, monkeypatch):
    """Written LEDGER_BLOCK rows at a time from a memory-mapped N×C file, the Parquet ledger holds
    the ids, labels, class ids and top-k of the whole array, and its fingerprint and classes."""
    monkeypatch.setattr(ledger_module, "LEDGER_BLOCK", 7)
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(50, 12)).astype(np.float32)
    np.save(tmp_path / "new.npy", logits)
    labels, ids = rng.integers(0, 12, 50), rng.permutation(1000)[:50] * 7919
    path = write_ledger(
        tmp_path / "predictions.parquet", np.load(tmp_path / "new.npy", mmap_mode="r"), labels, ids, "fp", [1, 3]
    )
    assert pq.ParquetFile(path).num_row_groups == 8  # 50 rows, 7 a block
    ledger = read_ledger(path)
    order = np.argsort(-logits, axis=1, kind="stable")[:, :5]
    assert np.array_equal(ledger["class_ids"], logits.argmax(1)) and ledger["class_ids"].dtype == np.int32
    assert np.array_equal(ledger["topk_indices"], order)
    assert np.array_equal(ledger["topk_values"], np.take_along_axis(logits, order, axis=1))
    assert np.array_equal(ledger["labels"], labels) and np.array_equal(ledger["ids"], ids)
    assert ledger["fingerprint"] == "fp" and list(ledger["known_classes"]) == [1, 3] and not ledger["positional"]
    only = read_ledger(path, ("ids", "class_ids"))
    assert set(only) == {"ids", "class_ids", "known_classes", "fingerprint", "positional"}


def _ledger(ids, labels, predicted, known=None):
    return {
        "ids": np.asarray(ids, np.int64),
        "labels": np.asarray(labels, np.int64),
        "class_ids": np.asarray(predicted, np.int64),
        "known_classes": None if known is None else np.asarray(known),
        "positional": False,
        "fingerprint": "",
    }


def test_two_ledgers_compare_on_the_ids_both_hold_whatever_their_order():
    """v1 on ids 10..15, v2 on 12..19 in another order: the counts are those of the 4 shared ids,
    by hand; copies of one id pair k-th with k-th (ordered by label)."""
    old = _ledger([10, 11, 12, 13, 14, 15], [0, 1, 0, 1, 0, 1], [0, 1, 0, 1, 1, 1])
    new = _ledger([19, 15, 14, 13, 12, 16, 17, 18], [0, 1, 0, 1, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0, 0])
    in_old, in_new = shared_samples(old, new)
    assert sorted(old["ids"][in_old].tolist()) == [12, 13, 14, 15]
    assert np.array_equal(old["ids"][in_old], new["ids"][in_new])
    counts = pair_counts(old, new)  # 12: right→right, 13: right→wrong, 14: wrong→right, 15: right→wrong
    assert (counts.n, counts.negative, counts.positive, counts.old_errors, counts.new_errors) == (4, 2, 1, 1, 2)
    copies_old = _ledger([7, 7, 8], [1, 0, 2], [1, 0, 2])
    copies_new = _ledger([7, 7], [0, 1], [0, 2])  # the label-1 copy flips
    counts = pair_counts(copies_old, copies_new)
    assert (counts.n, counts.negative) == (2, 1)


def test_a_ledger_by_position_compares_only_with_one_by_position(tmp_path):
    labels = np.array([0, 1, 1, 0])
    legacy = tmp_path / "predictions.npz"
    np.savez(legacy, class_ids=np.array([0, 1, 0, 0], np.int32), labels=labels, fingerprint=np.array("fp"))
    old = read_ledger(legacy)
    assert old["positional"] and old["ids"].tolist() == [0, 1, 2, 3] and old["known_classes"] is None
    assert pair_counts(old, read_ledger(legacy)).n == 4
    with pytest.raises(LedgerMismatch, match="predates sample ids .* re-evaluate it"):
        shared_samples(old, _ledger([0, 1, 2, 3], labels, labels))


def test_a_chains_nfr_matrix_counts_each_pair_on_its_shared_samples(tmp_path):
    """Three versions: v1 on samples 0..59, v2 (trained on classes 0–2) and v3 on 20..89 (grown
    data): each cell equals `nfr_matrix` on the ids the pair shares, with the row's known classes."""
    rng = np.random.default_rng(2)
    truth = rng.integers(0, 5, 90)
    predicted = [np.where(rng.random(90) < p, truth, rng.integers(0, 5, 90)) for p in (0.5, 0.7, 0.9)]
    spans = [np.arange(0, 60), np.arange(20, 90), np.arange(20, 90)[::-1]]
    known = [None, [0, 1, 2], None]
    ledgers = []
    for v in range(3):
        ids = spans[v] * 101
        path = write_ledger(
            tmp_path / f"v{v}.parquet",
            np.eye(5, dtype=np.float32)[predicted[v][spans[v]]],
            truth[spans[v]],
            ids,
            "f",
            known[v],
        )
        ledgers.append(read_ledger(path, COMPARED))
    matrix, shared = chain_nfr_matrix(ledgers)
    for i in range(3):
        for j in range(3):
            common = np.intersect1d(spans[i], spans[j])
            scope = np.ones(len(common), bool) if known[i] is None else np.isin(truth[common], known[i])
            samples = common[scope]
            expected = nfr_matrix([predicted[i][samples], predicted[j][samples]], truth[samples])[0, 1]
            assert shared[i, j] == len(samples) and np.isclose(matrix[i, j], expected)
    assert shared[0, 2] == 40 and shared[1, 2] < 70


def test_the_evaluation_task_streams_each_model_and_the_paragon_in_chunks(tmp_path, monkeypatch):
    """`eval_chunks` reads the eval split once: several chunks, each under its byte bound, whose
    rows are each checkpoint's logits in the split's order, and the paragon the mean of the
    ensemble's."""
    from workers.models.checkpoints import load_model, save_checkpoint
    from workers.models.predict import predict_logits
    from workers.tasks import bodies
    from workers.tasks.resolve import cached_splits, initial_model, settings_of

    plan = preflight(
        parse_spec(
            {
                "model": "evaluation",
                "version": "v2",
                "arch": "mlp-small",
                "method": {"name": "none"},
                "data": {"train_limit": 300, "eval_limit": 100},
                "storage": str(tmp_path / "storage"),
            }
        )
    )
    job = plan.student_job()
    uris = []
    for seed in range(3):
        model = initial_model(replace(job, config=replace(job.config, seed=seed)))
        uris.append(str(save_checkpoint(tmp_path / f"model-{seed}.pt", model, settings_of(job))))
    monkeypatch.setattr(bodies, "EVAL_CHUNK_BYTES", 30 * 2 * 10 * 4)  # 30 rows of two 10-class outputs
    monkeypatch.setattr(bodies, "logit_chunks", _in_batches_of(8, bodies.logit_chunks))
    chunks = list(bodies.eval_chunks({"new": uris[0]}, plan.data, ensemble=uris[1:]))
    assert len(chunks) == 4 and all(set(c.logits) == {"new", "paragon"} for c in chunks)
    assert [len(c.logits["new"]) for c in chunks] == [24, 24, 24, 28] == [len(c) for c in chunks]  # ≤ 30 rows
    split = cached_splits(plan.data).eval
    assert np.array_equal(np.concatenate([c.ids for c in chunks]), split.ids.numpy())
    assert np.array_equal(np.concatenate([c.labels for c in chunks]), split.labels.numpy())
    each = [predict_logits(load_model(uri)[0], split).numpy() for uri in uris]
    assert np.allclose(np.concatenate([c.logits["new"] for c in chunks]), each[0], atol=1e-6)
    assert np.allclose(np.concatenate([c.logits["paragon"] for c in chunks]), (each[1] + each[2]) / 2, atol=1e-6)
    assert not np.allclose(each[1], each[2])
    ids = bodies.eval_predictions({"new": uris[0], "other": uris[1]}, plan.data)
    assert np.array_equal(ids["new"], each[0].argmax(1)) and ids["new"].dtype == np.int64
    named = list(bodies.eval_chunks({"a": uris[1]}, plan.data, ensemble=uris[1:]))  # uris[1] loaded once
    assert np.allclose(np.concatenate([c.logits["paragon"] for c in named]), (each[1] + each[2]) / 2, atol=1e-6)


def test_the_evaluation_task_sends_what_publish_records_after_its_chunks(tmp_path):
    """Asked (`RecordRequest`), the evaluation task sends, after the chunks, the registry's copy of
    the model's checkpoint: its settings, weights and classes with the eval split's fingerprint,
    without the training's state; unasked (Tune, auto), chunks only."""
    import io

    from orchestrator.dataplane.slice_reads import SliceSource
    from orchestrator.execution.evaluation import RecordRequest, VersionRecords, evaluation_task
    from workers.models.checkpoints import load_weights_only, save_checkpoint
    from workers.tasks.resolve import initial_model, settings_of

    plan = preflight(
        parse_spec(
            {
                "model": "evaluation",
                "version": "v2",
                "arch": "mlp-small",
                "method": {"name": "none"},
                "data": {"train_limit": 300, "eval_limit": 100},
                "storage": str(tmp_path / "storage"),
            }
        )
    )
    job = plan.student_job()
    model = initial_model(job)
    uri = str(save_checkpoint(tmp_path / "trained.pt", model, settings_of(job), classes_seen=[0, 1], epoch=3))
    request = RecordRequest(SliceSource(None, "text", None, "utf-8", (), None), "fp-eval")
    sent = list(evaluation_task({"new": uri}, plan.data, "cpu", False, [], "eval", request))
    assert all(isinstance(item, EvalChunk) for item in sent[:-1]) and isinstance(sent[-1], VersionRecords)
    records = sent[-1]
    assert records.slice_values is None and records.protected_answers is None  # no slices, no protected set
    copy = load_weights_only(io.BytesIO(records.registry_checkpoint))
    assert copy["fingerprint"] == "fp-eval" and copy["classes_seen"] == [0, 1] and "epoch" not in copy
    assert all(torch.equal(copy["state_dict"][k], v) for k, v in model.state_dict().items())
    unasked = list(evaluation_task({"new": uri}, plan.data, "cpu", False, [], "eval"))
    assert all(isinstance(item, EvalChunk) for item in unasked) and len(unasked) == len(sent) - 1


def _in_batches_of(size, logit_chunks):
    """`logit_chunks` with inference batches of `size` samples."""

    def chunks(models, data, batch_size=1024, device="cpu"):
        return logit_chunks(models, data, size, device)

    return chunks


def test_inference_restores_each_models_mode():
    from workers.models.predict import logit_chunks

    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 3), torch.nn.Dropout(0.5))
    model.train()
    from workers.data import ImageSet

    images = ImageSet(torch.zeros(5, 1, 2, 2, dtype=torch.uint8), torch.zeros(5, dtype=torch.int64), ("a", "b", "c"))
    outputs = list(logit_chunks({"m": (model, None)}, images, batch_size=2))
    assert [len(o.logits["m"]) for o in outputs] == [2, 2, 1] and model.training
    assert torch.equal(torch.cat([o.ids for o in outputs]), images.ids)


class RecordingDisplay:
    """A display that keeps what the stage showed."""

    live = False
    prefix = ""

    def __init__(self):
        self.shown = []

    def message(self, text):
        self.shown.append(("message", text))

    def add(self, task):
        self.shown.append(("add", task))

    def update(self, event):
        self.shown.append(("update", event.task, event.step, event.steps_per_epoch))

    def finish(self, task, summary):
        self.shown.append(("finish", task, summary))


def test_the_driver_writes_each_streamed_chunk_into_the_prediction_files_and_shows_progress(tmp_path, monkeypatch):
    """`evaluate` on a stream of three uneven chunks (the Ray task replaced by them): the .npy files
    hold every row in order, the metrics are the whole split's, and the display shows the samples
    evaluated after each chunk; the ensemble method's paragon is its "new"."""
    from types import SimpleNamespace

    from orchestrator.execution import evaluation
    from orchestrator.execution.watch import StageWatch

    rng = np.random.default_rng(3)
    labels, ids = rng.integers(0, 3, 25), rng.permutation(10_000)[:25]
    logits = {name: rng.normal(size=(25, 3)).astype(np.float32) for name in ("new", "old", "paragon")}
    windows = (slice(0, 10), slice(10, 11), slice(11, 25))
    asked = []

    records = evaluation.VersionRecords({"region": np.array(["north"] * 25)}, b"model.pt")

    def stream(plan, checkpoints, ensemble=(), split="eval", request=None):
        asked.append((dict(checkpoints), list(ensemble)))
        names = [*checkpoints, *(["paragon"] if ensemble else [])]
        for window in windows:
            yield EvalChunk({name: logits[name][window] for name in names}, ids[window], labels[window])
        yield records  # what publish records, last (`evaluation_task`)

    monkeypatch.setattr(evaluation, "stream_eval_chunks", stream)
    data = SimpleNamespace(
        path=None, text_column="text", id_column=None, encoding="utf-8", slice_columns=[], slices=None
    )
    plan = SimpleNamespace(
        spec=SimpleNamespace(old="old.pt", model="streamed-chunks", data=data),
        old=SimpleNamespace(classes=None),
        data=None,
        splits=SimpleNamespace(eval_labels=labels, eval_fingerprint="fp"),
    )
    display = RecordingDisplay()
    result = evaluation.evaluate(plan, "new.pt", ["r0.pt", "r1.pt"], tmp_path / "run", StageWatch(display))
    assert asked == [({"new": "new.pt", "old": "old.pt"}, ["r0.pt", "r1.pt"])]
    assert list(result.predictions) == ["new", "old", "paragon"] and result.n_eval == 25
    for name, path in result.predictions.items():
        assert np.array_equal(np.load(path), logits[name])
    assert np.array_equal(np.load(result.labels), labels) and np.array_equal(np.load(result.ids), ids)
    assert result.metrics["vs_old"] == update_report(logits["old"], logits["new"], labels)
    assert result.metrics["vs_paragon"] == update_report(logits["paragon"], logits["new"], labels)
    assert [s[2] for s in display.shown if s[0] == "update"] == [10, 11, 25]
    assert display.shown[-1][:2] == ("finish", "evaluation") and "on 25 samples" in display.shown[-1][2]
    assert result.records is not None and result.records.slice_values is records.slice_values
    assert result.records.registry_checkpoint == b"model.pt" and result.records.protected is None  # no set
    ensemble = evaluation.evaluate(plan, None, ["r0.pt"], tmp_path / "ensemble")
    assert np.array_equal(np.load(ensemble.predictions["new"]), logits["paragon"])
    assert "vs_paragon" not in ensemble.metrics and ensemble.metrics["vs_old"]["n"] == 25
