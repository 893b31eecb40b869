"""`congruent serve` on the two-node cluster: v1 served as champion, v2 shadowed, real held-out
Fashion-MNIST images sent as PNG with their ids, their labels sent as feedback; the live ledger's
figures are those `congruent compare` gives of the two versions' predictions on the same samples.
Then v2 is promoted on that live evidence (`congruent promote --live`) while a client keeps sending,
and the served champion is swapped with no failed request, on a cluster whose two CPUs v1 and its
shadow hold. The endpoint asks for its token; a gateway replica that restarts after the swap serves the
new champion, whose predecessor's application is gone."""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
from mlflow import MlflowClient

from conftest import run_update
from orchestrator.cli import main
from orchestrator.driver.compare import compare_predictions
from orchestrator.driver.serve import (
    champion_moved,
    gateway_status,
    post,
    serve_model,
    stop_serving,
    swap_champion,
)
from orchestrator.serving.access import TOKEN_ENV
from orchestrator.serving.predictor import Predictor
from orchestrator.serving.settings import RequestLimits, Resources, ServeSettings
from orchestrator.tracking import live, promotion, registry
from orchestrator.tracking.version_refs import VersionRef
from processes import free_port
from test_serve_faults import kill_replica
from test_serving import png

SAMPLES = 300  # Fashion-MNIST test images neither version saw, from 5,000 on


def traffic(url: str, body: dict, stop: threading.Event, outcomes: list) -> None:
    """One request after another until `stop`: each answer's served version, or what failed."""
    while not stop.is_set():
        try:
            outcomes.append(post(f"{url}/predict", body, timeout=60)["version"])
        except (OSError, ValueError, KeyError) as e:  # HTTP errors, resets, a body without a version
            outcomes.append(f"failed: {e!r}")


def test_the_live_nfr_of_a_shadowed_candidate_is_compare_s_and_its_promotion_swaps_without_errors(
    ray_cluster, spec_document, tmp_path, fashion_mnist, capsys, monkeypatch
):
    from ray import serve

    model = f"live-{tmp_path.name}"[-60:]
    data = {"train_limit": 1000, "eval_limit": 400}
    run_update(spec_document(model=model, version="v1", data=data), tmp_path / "v1")
    run_update(
        spec_document(model=model, version="v2", arch="mlp", data={**data, "train_limit": 2000}), tmp_path / "v2"
    )
    promotion.set_champion(model, "1")
    images = fashion_mnist.eval.images[5000 : 5000 + SAMPLES]
    labels = fashion_mnist.eval.labels[5000 : 5000 + SAMPLES].numpy()
    encoded = [png(image[0].numpy()) for image in images]
    ids = [f"sample-{i}" for i in range(SAMPLES)]
    settings = ServeSettings(max_batch_size=16, chunk_rows=100, flush_s=1.0, limits=RequestLimits(max_body_bytes=2**20))
    monkeypatch.setenv(TOKEN_ENV, "live-test-token")  # `post` sends it, as `congruent feedback` does
    # one CPU each: v1 and its shadow v2 hold both of the cluster's, as on a 2-core machine
    served = swapped = serve_model(model, "2", settings, port=free_port(), resources=Resources(cpus=1))
    try:
        with urllib.request.urlopen(f"{served.url}/healthz", timeout=30) as response:
            assert json.loads(response.read()) == {"status": "ok"}  # open, and says nothing more
        health = gateway_status(served.url)
        assert (health["status"], health["version"], health["shadow"]) == ("ok", "1", "2")
        rebound = urllib.request.Request(f"{served.url}/predict", b"{}", {"host": "attacker.example"})
        with pytest.raises(urllib.error.HTTPError) as refused:  # a DNS-rebound page: served on loopback only
            urllib.request.urlopen(rebound, timeout=30)
        assert refused.value.code == 403
        for headers in ({}, {"authorization": "Bearer another-token"}):
            headers = {"content-type": "application/json", **headers}
            request = urllib.request.Request(f"{served.url}/predict", b"{}", headers)
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=30)
            assert refused.value.code == 401  # before anything is read or answered
        with pytest.raises(urllib.error.HTTPError) as refused:  # over --max-body-mb: its rest is never read
            post(f"{served.url}/predict", {"inputs": ["A" * 2**21]})
        assert refused.value.code == 413
        answered = []
        for start in range(0, SAMPLES, 50):
            body = {
                "inputs": [base64.b64encode(b).decode() for b in encoded[start : start + 50]],
                "ids": ids[start : start + 50],
            }
            answer = post(f"{served.url}/predict", body)
            assert answer["version"] == "1" and [p["id"] for p in answer["predictions"]] == ids[start : start + 50]
            answered += [p["class"] for p in answer["predictions"]]
        feedback = post(f"{served.url}/feedback", {"labels": [{"id": i, "label": int(k)} for i, k in zip(ids, labels)]})
        assert feedback == {"accepted": SAMPLES, "unmatched": 0, "unchanged": 0, "relabelled": 0}
        # a label for an id never served is not kept; one that would change an id's label is not taken
        wrong = (int(labels[0]) + 1) % 10
        stray = post(
            f"{served.url}/feedback", {"labels": [{"id": "never-served", "label": 0}, {"id": ids[0], "label": wrong}]}
        )
        assert stray == {"accepted": 0, "unmatched": 1, "unchanged": 1, "relabelled": 0}
        plain = urllib.request.Request(
            f"{served.url}/feedback",
            json.dumps({"id": ids[1], "label": wrong}).encode(),
            {"content-type": "text/plain", "authorization": "Bearer live-test-token"},
        )
        with pytest.raises(urllib.error.HTTPError) as refused:  # what a web page may send without asking
            urllib.request.urlopen(plain, timeout=30)
        assert refused.value.code == 415
        post(f"{served.url}/flush", {})
        counts = live.run_counts(served.live_run)  # before the swap's traffic adds unlabelled pairs
        clients = {row["client"] for kind, rows in live.chunks(served.live_run) if kind == "pairs" for row in rows}

        # v2 promoted on its live evidence while clients keep sending: swapped, no request fails
        assert main(["promote", model, "2", "--max-nfr", "1", "--max-er-increase", "1", "--live"]) == 0
        assert f"{model} v2 is now champion" in capsys.readouterr().out
        stop, outcomes = threading.Event(), []
        sender = threading.Thread(
            target=traffic, args=(served.url, {"inputs": [base64.b64encode(encoded[0]).decode()]}, stop, outcomes)
        )
        sender.start()
        try:
            while len(outcomes) < 5:
                time.sleep(0.05)
            assert champion_moved(served) == "2"
            swapped = swap_champion(served, "2")
            deadline = time.monotonic() + 120
            while outcomes[-20:] != ["2"] * 20 and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            stop.set()
            sender.join(timeout=120)
        health = gateway_status(served.url)
        # the gateway's replica restarts: it was deployed with v1, whose application is deleted by now
        kill_replica(served.app_name, "Gateway")
        deadline, after_restart = time.monotonic() + 300, None
        while after_restart is None and time.monotonic() < deadline:
            try:
                after_restart = post(f"{served.url}/predict", {"inputs": [base64.b64encode(encoded[0]).decode()]}, 30)
            except (OSError, ValueError):  # refused or timed out while Serve starts another replica
                time.sleep(1)
        health_after_restart = gateway_status(served.url)
    finally:
        stop_serving(swapped)
        serve.shutdown()
    assert [o for o in outcomes if o not in ("1", "2")] == []  # not one request failed through the swap
    assert outcomes[0] == "1" and outcomes[-20:] == ["2"] * 20
    assert (health["version"], health["shadow"], swapped.live_run) == ("2", None, None)
    assert after_restart is not None and after_restart["version"] == "2"
    assert (health_after_restart["version"], health_after_restart["shadow"]) == ("2", None)
    offline = [
        [a.class_id for a in Predictor(registry.checkpoint_of(VersionRef(model, v))).answer(encoded)]
        for v in ("1", "2")
    ]
    assert answered == offline[0]  # what the client got is the champion's answer
    compared = compare_predictions(labels, [np.array(offline[0]), np.array(offline[1])])
    assert compared["pairs"][0]["nfr"] > 0  # the test means something: v2 flips some of v1's right answers
    assert (counts.pairs, counts.labelled) == (SAMPLES, SAMPLES)
    assert len(clients) == 1 and len(clients.pop() or "") == 16  # one peer, by digest (live_window.py's bound)
    assert counts.negative_flips / counts.labelled == compared["pairs"][0]["nfr"]
    assert counts.positive_flips / counts.labelled == compared["pairs"][0]["pfr"]
    assert [counts.champion_errors / SAMPLES, counts.candidate_errors / SAMPLES] == compared["error_rate"]
    assert counts.disagreements == int((np.array(offline[0]) != np.array(offline[1])).sum())
    after = live.run_counts(served.live_run)  # the swap's shadowed traffic joined the session, unlabelled
    assert after.labelled == SAMPLES and after.negative_flips == counts.negative_flips
    candidate_run = registry.run_of(VersionRef(model, "2"))
    history = MlflowClient().get_metric_history(candidate_run, "live.nfr")
    assert history and history[-1].value == pytest.approx(compared["pairs"][0]["nfr"])
    assert MlflowClient().get_run(served.live_run).info.status == "FINISHED"
    assert main(["versions", model, "--json"]) == 0
    printed = capsys.readouterr().out.strip().splitlines()  # Ray may print its workers' lines before
    [summary] = json.loads(printed[-1])["live"]
    assert (summary["champion"], summary["candidate"], summary["labelled"]) == ("1", "2", SAMPLES)
    assert summary["nfr"] == compared["pairs"][0]["nfr"]
