"""`congruent serve --canary` on the two-node cluster with real versions and held-out Fashion-MNIST
images: v2 answers half of the ids beside champion v1, whose answers shadow it; labels come back as
feedback and the canary, within its limit on enough labelled pairs, is promoted and answers every id.
Then v3, a much weaker model, answers half the ids beside v2: its live NFR's lower bound passes the
limit at the first labels and it is withdrawn at once, every id back to v2; the driver deletes its
application, the session's run says why, and a gateway replica that restarts keeps it withdrawn. The
live counts are those of the versions' offline predictions on the canary's ids."""

from __future__ import annotations

import base64
import time

import numpy as np
from mlflow import MlflowClient

from conftest import run_update
from orchestrator.driver.serve import canary_withdrawn, gateway_status, post, serve_model, stop_serving
from orchestrator.serving.canary import canary_decision
from orchestrator.serving.handles import version_app_name
from orchestrator.serving.predictor import Predictor
from orchestrator.serving.requests import shadowed
from orchestrator.serving.settings import CanaryRule, Resources, ServeSettings
from orchestrator.tracking import live, promotion, registry
from orchestrator.tracking.version_refs import VersionRef
from processes import free_port
from reliability_records import record
from test_serve_faults import kill_replica
from test_serving import png

SAMPLES = 300  # Fashion-MNIST test images no version saw, from 5,000 on
FRACTION = 0.5


def healthz(url: str) -> dict:
    """The gateway's state (`GET /status`: /healthz says only that it answers)."""
    return gateway_status(url, timeout=60)


def send_all(url: str, encoded: list[bytes], ids: list[str]) -> list[dict]:
    """Every sample once, 50 a request; the predictions in order."""
    predictions = []
    for start in range(0, len(ids), 50):
        body = {
            "inputs": [base64.b64encode(b).decode() for b in encoded[start : start + 50]],
            "ids": ids[start : start + 50],
        }
        predictions += post(f"{url}/predict", body)["predictions"]
    return predictions


def offline_classes(model: str, version: str, encoded: list[bytes]) -> np.ndarray:
    predictor = Predictor(registry.checkpoint_of(VersionRef(model, version)))
    return np.array([a.class_id for a in predictor.answer(encoded)])


def test_a_canary_within_its_limit_is_promoted_and_one_that_flips_is_withdrawn_at_once(
    ray_cluster, spec_document, tmp_path, fashion_mnist
):
    from ray import serve

    model = f"canary-{tmp_path.name}"[-60:]
    data = {"train_limit": 1000, "eval_limit": 400}
    run_update(spec_document(model=model, version="v1", data=data), tmp_path / "v1")
    run_update(
        spec_document(model=model, version="v2", arch="mlp", data={**data, "train_limit": 2000}), tmp_path / "v2"
    )
    weak = {"epochs": 1, "batch_size": 128, "lr": 0.002, "seed": 5}  # far from converged: flips many of v2's
    run_update(spec_document(model=model, version="v3", data={**data, "train_limit": 300}, train=weak), tmp_path / "v3")
    promotion.set_champion(model, "1")
    images = fashion_mnist.eval.images[5000 : 5000 + SAMPLES]
    labels = fashion_mnist.eval.labels[5000 : 5000 + SAMPLES].numpy()
    encoded = [png(image[0].numpy()) for image in images]
    ids = [f"sample-{i}" for i in range(SAMPLES)]
    canary_ids = np.array([shadowed(i, FRACTION) for i in ids])
    assert 100 <= canary_ids.sum() <= 200  # the share is decided by id
    feedback = {"labels": [{"id": i, "label": int(k)} for i, k in zip(ids, labels)]}
    offline = {v: offline_classes(model, v, encoded) for v in ("1", "2", "3")}
    port = free_port()

    # v2 beside v1: decided at 100 labelled canary pairs, within a lenient limit: promoted
    lenient = CanaryRule(FRACTION, max_nfr=0.5, min_labelled=100, auto_promote=True, max_er_increase=1.0)
    settings = ServeSettings(max_batch_size=16, chunk_rows=100, flush_s=1.0, canary=lenient)
    served = serve_model(model, "2", settings, port=port, resources=Resources(cpus=1))
    try:
        assert healthz(served.url)["canary"]["state"] == "running"
        answered = send_all(served.url, encoded, ids)
        by = np.array([p["version"] for p in answered])
        assert list(by[canary_ids]) == ["2"] * int(canary_ids.sum()) and set(by[~canary_ids]) == {"1"}
        classes = np.array([p["class"] for p in answered])
        assert (classes[canary_ids] == offline["2"][canary_ids]).all()
        assert (classes[~canary_ids] == offline["1"][~canary_ids]).all()
        first = post(f"{served.url}/feedback", feedback, scope="feedback")
        assert (first["accepted"], first["unmatched"]) == (int(canary_ids.sum()), int((~canary_ids).sum()))
        assert first["canary"]["state"] == "promoted", first["canary"]
        assert registry.resolve(f"{model}@champion").version == "2"
        after = send_all(served.url, encoded[:50], ids[:50])
        assert {p["version"] for p in after} == {"2"}  # every id, at once: the gateway moved itself
        promoted_run = served.live_run
    finally:
        stop_serving(served)
    counts = live.run_counts(promoted_run)
    right_before, right_after = offline["1"] == labels, offline["2"] == labels
    assert counts.labelled == canary_ids.sum()
    assert counts.negative_flips == int((right_before & ~right_after & canary_ids).sum())
    assert counts.champion_errors == int((~right_before & canary_ids).sum())
    assert MlflowClient().get_run(promoted_run).data.tags[live.OUTCOME_TAG].startswith("promoted: ")

    # v3 beside v2: its flips show at the first labels, so it is withdrawn before 268 pairs are asked for
    strict = CanaryRule(FRACTION, max_nfr=0.01, min_labelled=268)
    flips = int(((offline["2"] == labels) & (offline["3"] != labels) & canary_ids).sum())
    assert canary_decision(flips, int(canary_ids.sum()), strict)[0] == "withdraw"  # the test means something
    settings = ServeSettings(max_batch_size=16, chunk_rows=100, flush_s=1.0, canary=strict)
    served = serve_model(model, "3", settings, port=port, resources=Resources(cpus=1))
    try:
        assert {p["version"] for p in send_all(served.url, encoded, ids)} == {"2", "3"}
        answer = post(f"{served.url}/feedback", feedback, scope="feedback")
        assert answer["canary"]["state"] == "withdrawn" and "lower bound" in answer["canary"]["reason"]
        assert {p["version"] for p in send_all(served.url, encoded, ids)} == {"2"}  # every id, at once
        reason = canary_withdrawn(served)
        assert reason == answer["canary"]["reason"]
        assert version_app_name(model, "3") not in serve.status().applications
        tags = MlflowClient().get_run(served.live_run).data.tags
        assert tags[live.OUTCOME_TAG] == f"withdrawn: {reason}"
        assert live.run_counts(served.live_run).negative_flips == flips
        kill_replica(served.app_name, "Gateway")  # a new gateway replica reads the withdrawal back
        deadline, health = time.monotonic() + 300, None
        while health is None and time.monotonic() < deadline:
            try:
                health = healthz(served.url)
            except OSError:  # refused or timed out while Serve starts another replica
                time.sleep(1)
        assert health is not None and health["canary"]["state"] == "withdrawn"
        assert {p["version"] for p in send_all(served.url, encoded[:50], ids[:50])} == {"2"}
    finally:
        stop_serving(served)
        serve.shutdown()
    sessions = live.live_summaries(model, 0.95)  # what `congruent versions` shows
    outcomes = {(s["champion"], s["candidate"]): (s["canary"], s["canary_outcome"].split(":")[0]) for s in sessions}
    assert outcomes == {("1", "2"): (FRACTION, "promoted"), ("2", "3"): (FRACTION, "withdrawn")}
    record("serving_security", check="a canary whose live NFR's lower bound passes --max-nfr is withdrawn at the "
           "labels that show it (every id back to the champion, still so after a gateway restart); one within the "
           "limit at --min-live pairs is promoted through promote --live's gate", passed=True)  # fmt: skip
