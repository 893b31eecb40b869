"""Serving (orchestrator/serving/, tracking/live.py) without Ray: what a request and a feedback body
may hold, which samples are shadowed, the live figures counted by hand, the live ledger's chunks in
an MLflow run, a registered version answering raw texts and encoded images, and the commands'
refusals."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
import torch

from orchestrator.cli import main
from orchestrator.serving.predictor import Predictor
from orchestrator.serving.requests import RequestError, digest, parse_feedback, parse_predict, shadowed
from orchestrator.serving.settings import RequestLimits
from orchestrator.tracking import live, store
from workers.data.augment import to_model_input
from workers.data.input_spec import InputSpec
from workers.data.tokenizer import encode_texts, text_input
from workers.models.checkpoints import ModelSettings, save_checkpoint


def png(image: np.ndarray) -> bytes:
    """A 28×28 uint8 image as PNG bytes."""
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(image).save(out, format="PNG")
    return out.getvalue()


EIGHT = RequestLimits(max_samples=8)


def test_a_predict_body_gives_samples_with_their_ids_and_digests():
    samples = parse_predict({"inputs": ["late again", "great crew"], "ids": ["a", 7]}, "text", EIGHT)
    assert [(s.id, s.payload) for s in samples] == [("a", "late again"), ("7", "great crew")]
    assert samples[0].digest == digest("late again") and len(samples[0].digest) == 32
    one = parse_predict({"input": "lost my bag"}, "text", EIGHT)
    assert len(one) == 1 and len(one[0].id) == 32  # drawn
    image = png(np.zeros((28, 28), np.uint8))
    [sample] = parse_predict({"input": base64.b64encode(image).decode(), "id": "x"}, "image", EIGHT)
    assert sample.payload == image and sample.digest == digest(image)


@pytest.mark.parametrize(
    ("body", "modality", "problem"),
    [
        ([], "text", "JSON object"),
        ({"inputs": ["a"], "input": "b"}, "text", "not both"),
        ({"inputs": []}, "text", "non-empty"),
        ({"inputs": ["a"] * 9}, "text", "at most 8"),
        ({"inputs": ["a", "b"], "ids": ["x"]}, "text", "one id per input"),
        ({"inputs": [3]}, "text", "a text string"),
        ({"inputs": ["a"], "ids": [True]}, "text", "string or an integer"),
        ({"inputs": ["a"], "ids": [""]}, "text", "1 to 200"),
        ({"inputs": ["not base64!"]}, "image", "not base64"),
    ],
)
def test_a_bad_predict_body_is_refused_in_one_line(body, modality, problem):
    with pytest.raises(RequestError, match=problem):
        parse_predict(body, modality, EIGHT)


def test_feedback_bodies_and_their_refusals():
    assert parse_feedback({"labels": [{"id": "a", "label": 2}, {"id": 5, "label": 0}]}, 3) == [("a", 2), ("5", 0)]
    assert parse_feedback({"id": "a", "label": 1}, 3) == [("a", 1)]
    for body, problem in [
        ({"labels": []}, "non-empty"),
        ({"labels": [{"id": "a"}]}, "`id` and `label`"),
        ({"id": "a", "label": 3}, r"0\.\.2"),
        ({"id": "a", "label": True}, "class id"),
    ]:
        with pytest.raises(RequestError, match=problem):
            parse_feedback(body, 3)


def test_the_shadowed_share_is_the_fraction_and_depends_on_the_id_alone():
    ids = [f"request-{i}" for i in range(20000)]
    picked = [shadowed(i, 0.3) for i in ids]
    assert abs(np.mean(picked) - 0.3) < 0.015
    assert picked == [shadowed(i, 0.3) for i in ids]
    assert all(shadowed(i, 1.0) for i in ids[:100]) and not any(shadowed(i, 0.0) for i in ids[:100])


def test_live_counts_by_hand():
    """Pairs (champion, candidate, label): (0,0,0) both right; (1,2,1) a negative flip and a
    disagreement; (2,2,−) unlabelled; (1,1,2) both wrong; (0,1,1) a positive flip and a disagreement."""
    counts = live.live_counts(np.array([0, 1, 2, 1, 0]), np.array([0, 2, 2, 1, 1]), np.array([0, 1, -1, 2, 1]))
    assert counts == live.LiveCounts(
        pairs=5, disagreements=2, labelled=4, champion_errors=2, candidate_errors=2, negative_flips=1, positive_flips=1
    )
    figures = counts.figures(0.95)
    assert figures["disagreement"] == 0.4 and figures["nfr"] == 0.25 and figures["pfr"] == 0.25
    assert figures["disagreement_lower"] < 0.4 < figures["disagreement_upper"] and figures["nfr_upper"] > 0.25
    empty = live.live_counts(np.array([], np.int64), np.array([], np.int64), np.array([], np.int64)).figures(0.95)
    assert empty["nfr"] is None and empty["disagreement"] is None


def test_the_live_ledger_is_chunks_of_a_run_of_its_own(tmp_path):
    store.configure()
    run_id = live.start_live_run(f"ledger-{tmp_path.name}", "1", "2")
    rows = [
        {"id": f"r{i}", "digest": "d", "time": 1.0, "champion_class": c, "champion_probability": 0.9,
         "candidate_class": k, "candidate_probability": 0.8}
        for i, (c, k) in enumerate([(0, 0), (1, 2), (2, 2)])
    ]  # fmt: skip
    live.write_chunk(run_id, "pairs", rows[:2])
    live.write_chunk(run_id, "pairs", rows[2:] + [{**rows[0], "time": 0.5, "candidate_class": 1}])  # r0 resent late
    live.write_chunk(run_id, "pairs", [rows[1]])  # r1 written twice (its reply was lost): counted once
    live.write_chunk(run_id, "labels", [{"id": "r1", "label": 1, "time": 2.0}, {"id": "r0", "label": 0, "time": 2.0}])
    assert live.run_counts(run_id) == live.live_counts(np.array([0, 1, 2]), np.array([0, 2, 2]), np.array([0, 1, -1]))
    [summary] = live.live_summaries(f"ledger-{tmp_path.name}", 0.95)
    assert (summary["champion"], summary["candidate"], summary["pairs"], summary["nfr"]) == ("1", "2", 3, 0.5)


def test_an_image_version_answers_encoded_images_as_its_model_reads_the_pixels(tmp_path, fashion_mnist):
    settings = ModelSettings("mlp-small", 10, InputSpec.image(1, 28, mean=(0.29,), std=(0.35,)))
    model = settings.build(seed=3).eval()
    path = save_checkpoint(tmp_path / "model.pt", model, settings, classes=[f"c{i}" for i in range(10)])
    images = fashion_mnist.eval.images[:16]
    predictor = Predictor(str(path))
    answers = predictor.answer([png(image[0].numpy()) for image in images])
    with torch.no_grad():
        probabilities = torch.softmax(model(to_model_input(images, (0.29,), (0.35,))), 1)
    assert [a.class_id for a in answers] == probabilities.argmax(1).tolist()
    assert np.allclose([a.probability for a in answers], probabilities.max(1).values.numpy(), atol=1e-5)
    assert predictor.class_names == [f"c{i}" for i in range(10)]
    with pytest.raises(RequestError, match="cannot read image"):
        predictor.answer([b"not an image"])


def test_a_text_version_answers_raw_texts_through_its_own_tokenizer(tmp_path):
    texts = ["the flight was late again", "great crew, lovely flight", "lost my bag", "thanks for the upgrade"] * 10
    spec = text_input(texts, "wordpiece", vocab_size=200, max_length=16)
    settings = ModelSettings("text-bag", 2, spec)
    model = settings.build(seed=0).eval()
    path = save_checkpoint(tmp_path / "model.pt", model, settings)
    asked = ["late flight", "lovely crew, thanks", "bag"]
    answers = Predictor(str(path)).answer(asked)
    ids, _ = encode_texts(spec, asked)
    with torch.no_grad():
        expected = torch.softmax(model(ids), 1)
    assert [a.class_id for a in answers] == expected.argmax(1).tolist()
    assert np.allclose([a.probability for a in answers], expected.max(1).values.numpy(), atol=1e-5)


def test_serving_a_model_without_a_champion_or_detached_without_a_cluster_is_refused(capsys, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert main(["serve", "no-such-model"]) == 2
    assert "no registered model 'no-such-model'" in capsys.readouterr().err
    assert main(["serve", "m", "--detach"]) == 2
    assert "--detach leaves the application on a cluster" in capsys.readouterr().err
    assert main(["serve", "m", "--fraction", "5"]) == 2


def test_feedback_refuses_a_file_without_ids_and_labels(tmp_path, capsys):
    bad = tmp_path / "labels.csv"
    bad.write_text("request,label\na,1\n")
    assert main(["feedback", "m", str(bad)]) == 2
    assert "header names `id` and `label`" in capsys.readouterr().err
    bad.write_text("id,label\na,one\n")
    assert main(["feedback", "m", str(bad)]) == 2
    assert "line 2: label 'one' is not a class id" in capsys.readouterr().err


def test_the_shadow_runs_after_the_response_and_a_failing_one_is_only_counted():
    """The gateway's `Shadow.send` returns at once however slow the candidate is; the pairs reach
    the ledger once it answers; a candidate that raises is counted and nothing reaches the ledger."""
    import asyncio
    import time

    from orchestrator.serving.requests import Sample
    from orchestrator.serving.shadow import Shadow

    samples = [Sample(f"r{i}", f"text {i}", digest(f"text {i}")) for i in range(4)]
    champion = [(0, 0.9), (1, 0.8), (2, 0.7), (0, 0.6)]
    ledger: list[dict] = []

    async def slow(payloads):
        await asyncio.sleep(0.5)
        return "2", [(1, 0.5)] * len(payloads)

    async def failing(payloads):
        raise RuntimeError("candidate down")

    async def keep(rows):
        ledger.extend(rows)

    async def scenario():
        shadow = Shadow(slow, keep, 1.0)
        started = time.perf_counter()
        shadow.send(samples, champion, answered=12.0)
        assert time.perf_counter() - started < 0.1 and not ledger and len(shadow.tasks) == 1
        await shadow.drain(timeout=5)
        assert [(r["id"], r["champion_class"], r["candidate_class"], r["time"]) for r in ledger] == [
            (f"r{i}", champion[i][0], 1, 12.0) for i in range(4)
        ]
        broken = Shadow(failing, keep, 1.0)
        broken.send(samples, champion, answered=13.0)
        await broken.drain(timeout=5)
        assert broken.failures == 1 and len(ledger) == 4
        none = Shadow(slow, keep, 0.0)
        none.send(samples, champion, answered=14.0)
        assert not none.tasks

    asyncio.run(scenario())


def test_rows_that_come_while_the_ledger_writes_a_chunk_are_kept_for_the_next(tmp_path, monkeypatch):
    """The live ledger's writer (`LiveLedger`, run here as the plain class Serve wraps): pairs added
    while a chunk is being written are not in it and not lost; a write that fails keeps its rows;
    a new ledger of the same run reads the chunks back (a restarted replica)."""
    import asyncio
    import time

    from orchestrator.serving import ledger as ledger_module
    from orchestrator.serving.settings import ServeSettings

    store.configure()
    run_id = live.start_live_run(f"writer-{tmp_path.name}", "1", "2")
    ledger_class = ledger_module.LiveLedger.func_or_class
    settings = ServeSettings(chunk_rows=1000, flush_s=3600)
    real_write = live.write_chunk

    def slow_write(run, kind, rows):
        time.sleep(0.3)
        return real_write(run, kind, rows)

    def row(i: int) -> dict:
        return {"id": f"p{i}", "digest": "d", "time": 1.0, "champion_class": i % 2, "champion_probability": 0.9,
                "candidate_class": 0, "candidate_probability": 0.9}  # fmt: skip

    async def scenario():
        ledger = ledger_class(run_id, run_id, settings)
        await ledger.add_pairs([row(i) for i in range(10)])
        monkeypatch.setattr(live, "write_chunk", slow_write)
        writing = asyncio.ensure_future(ledger.flush())
        await asyncio.sleep(0.1)
        await ledger.add_pairs([row(i) for i in range(10, 15)])  # during the write
        await writing
        assert live.run_counts(run_id).pairs == 10 and len(ledger.pending["pairs"]) == 5
        monkeypatch.setattr(live, "write_chunk", lambda *args: (_ for _ in ()).throw(OSError("store down")))
        with pytest.raises(OSError):
            await ledger.flush()
        assert len(ledger.pending["pairs"]) == 5
        monkeypatch.setattr(live, "write_chunk", real_write)
        await ledger.flush()
        assert live.run_counts(run_id).pairs == 15
        reborn = ledger_class(run_id, run_id, settings)
        await reborn.add_labels([("p1", 1), ("p3", 0)])
        assert reborn.counts().labelled == 2
        assert reborn.counts().pairs == 15 and reborn.counts().negative_flips == 1  # p1: 1 → 0, label 1
        reborn.__del__()  # Serve's graceful shutdown writes the labels still pending
        assert live.run_counts(run_id).labelled == 2 and not reborn.pending["labels"]

    asyncio.run(scenario())


def test_serve_follows_the_champion_alias_and_keeps_serving_while_the_registry_is_out_of_reach(monkeypatch, capsys):
    """The `congruent serve` loop's check: nothing moved, then MLflow down (said; v1 still served),
    then the alias on v3: one swap, after which v3 is what is served and the shadow's session is over;
    then a swap to v4 that fails: said, v3 still served, tried again; then v5, whose replicas find no
    room: rolled back, said once, not tried again until the alias moves."""
    from dataclasses import replace

    from mlflow.exceptions import MlflowException

    from orchestrator.driver import serve as driver
    from orchestrator.driver.serve_command import follow_champion
    from orchestrator.serving.settings import Resources, ServeSettings

    answers: list = [None, MlflowException("connection refused"), "3", "4", "5", "5"]

    def champion_moved(served):
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    swaps = []

    def swap_champion(served, version, place_s=120):
        swaps.append((served.champion, version))
        if version == "4":
            raise RuntimeError("Deploying application congruent-m--v4 failed")
        if version == "5":
            raise driver.NotPlaced("v5 (1 replica(s) of 1 CPU, 0 GPU) not running within 120 s")
        return replace(served, champion=version, candidate=None, live_run=None)

    monkeypatch.setattr(driver, "champion_moved", champion_moved)
    monkeypatch.setattr(driver, "swap_champion", swap_champion)
    served = driver.Served("m", "http://127.0.0.1:1", "congruent-m", "1", "2", "run", ServeSettings(), Resources())
    assert follow_champion(served) is served
    assert follow_champion(served) is served
    assert "the registry did not answer (MlflowException); serving v1" in capsys.readouterr().out
    followed = follow_champion(served)
    assert swaps == [("1", "3")] and (followed.champion, followed.candidate) == ("3", None)
    assert "champion moved to v3: swapping v1 for it; the live session of v2 ended" in capsys.readouterr().out
    assert follow_champion(followed) is followed  # a swap that failed: v3 still served, tried again later
    assert "the swap failed (RuntimeError: Deploying application congruent-m--v4 failed)" in capsys.readouterr().out
    unplaced: set[str] = set()
    assert follow_champion(followed, 120, unplaced) is followed and unplaced == {"5"}
    assert "m: rolled back, serving v3 until the alias moves again: v5 (1 replica" in capsys.readouterr().out
    assert follow_champion(followed, 120, unplaced) is followed  # v5 again: not tried, nothing said
    assert swaps == [("1", "3"), ("3", "4"), ("3", "5")] and capsys.readouterr().out == ""


def test_pairs_the_ledger_did_not_take_are_sent_again_with_the_next_and_only_the_oldest_beyond_the_cap_go():
    """A ledger that is restarting refuses two sends: their pairs go with the third, in order; with a
    cap of 3 waiting rows the oldest are dropped and counted; `drain` sends what waits."""
    import asyncio

    from orchestrator.serving.requests import Sample
    from orchestrator.serving.shadow import Shadow

    taken: list[str] = []
    down = [True, True, False, False, False]

    async def candidate(payloads):
        return "2", [(1, 0.5)] * len(payloads)

    async def ledger(rows):
        if down.pop(0):
            raise ConnectionError("ledger replica restarting")
        taken.extend(row["id"] for row in rows)

    def samples(*ids):
        return [Sample(i, f"text {i}", digest(f"text {i}")) for i in ids]

    async def scenario():
        shadow = Shadow(candidate, ledger, 1.0)
        for ids in (["a"], ["b", "c"], ["d"]):
            shadow.send(samples(*ids), [(0, 0.9)] * len(ids), answered=1.0)
            await shadow.drain(timeout=5)  # (drain's own resend finds the ledger down too, for a and b, c)
        assert taken == ["a", "b", "c", "d"] and shadow.unsent == [] and shadow.failures == 0
        capped = Shadow(candidate, ledger, 1.0, max_unsent=3)
        down[:] = [True, False]  # the two sends are coalesced into one append: refused, then taken at drain
        capped.send(samples("e", "f"), [(0, 0.9)] * 2, answered=2.0)
        capped.send(samples("g", "h"), [(0, 0.9)] * 2, answered=2.0)
        await asyncio.wait(set(capped.tasks))
        assert [row["id"] for row in capped.unsent] == ["f", "g", "h"] and capped.dropped == 1
        await capped.drain(timeout=5)
        assert taken[-3:] == ["f", "g", "h"] and capped.unsent == []

    asyncio.run(scenario())


def test_the_shadowed_samples_of_requests_close_in_time_go_in_one_candidate_call_and_one_append():
    """Five requests answered within the coalescing wait: one candidate call with their six samples,
    one ledger append, each pair with its own request's time; a later request gets calls of its own."""
    import asyncio

    from orchestrator.serving.requests import Sample
    from orchestrator.serving.shadow import Shadow

    calls, appends = [], []

    async def candidate(payloads):
        calls.append(list(payloads))
        return "2", [(1, 0.5)] * len(payloads)

    async def ledger(rows):
        appends.append([(row["id"], row["time"]) for row in rows])

    async def scenario():
        shadow = Shadow(candidate, ledger, 1.0, coalesce_s=0.05)
        for n in range(5):
            ids = [f"r{n}"] + (["extra"] if n == 4 else [])
            shadow.send([Sample(i, f"text {i}", digest(f"text {i}")) for i in ids], [(0, 0.9)] * len(ids), float(n))
        await shadow.drain(timeout=5)
        assert calls == [["text r0", "text r1", "text r2", "text r3", "text r4", "text extra"]]
        assert appends == [[("r0", 0.0), ("r1", 1.0), ("r2", 2.0), ("r3", 3.0), ("r4", 4.0), ("extra", 4.0)]]
        shadow.send([Sample("late", "text late", digest("text late"))], [(0, 0.9)], 9.0)
        await shadow.drain(timeout=5)
        assert len(calls) == len(appends) == 2 and appends[-1] == [("late", 9.0)]

    asyncio.run(scenario())
