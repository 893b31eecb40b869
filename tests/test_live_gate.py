"""A live gate nobody can steer, without Ray: the ledger keeps labels only of ids its session shadowed
and an id's first label unless a relabel is asked; every POST must be declared JSON; predicting,
labelling and control each ask for their own token."""

from __future__ import annotations

import asyncio

import pytest
from starlette.requests import Request

from orchestrator.serving import access
from orchestrator.serving import ledger as ledger_module
from orchestrator.serving.access import refusal
from orchestrator.serving.requests import RequestError, wants_relabel
from orchestrator.serving.settings import ServeSettings
from orchestrator.tracking import live, store
from reliability_records import record


def pair(sample_id: str, champion: int, candidate: int) -> dict:
    return {"id": sample_id, "digest": "d", "time": 1.0, "champion_class": champion, "champion_probability": 0.9,
            "candidate_class": candidate, "candidate_probability": 0.8}  # fmt: skip


def test_labels_count_only_for_shadowed_ids_and_the_first_stands_unless_relabelling_is_asked(tmp_path):
    store.configure()
    run_id = live.start_live_run(f"gate-{tmp_path.name}", "1", "2")
    ledger = ledger_module.LiveLedger.func_or_class(run_id, run_id, ServeSettings(chunk_rows=1000, flush_s=3600))

    async def scenario():
        await ledger.add_pairs([pair("a", 1, 0), pair("b", 1, 1)])  # a: the candidate flips it if its label is 1
        sent = await ledger.add_labels([("a", 1), ("b", 1), ("never-served", 0), ("unseen", 1)])
        assert sent == {"accepted": 2, "unmatched": 2, "unchanged": 0, "relabelled": 0}
        assert (ledger.counts().labelled, ledger.counts().negative_flips) == (2, 1)
        # relabelling "a" as the candidate's class would erase the flip: without asking, the first label stands
        sent = await ledger.add_labels([("a", 0), ("a", 1)])
        assert sent == {"accepted": 0, "unmatched": 0, "unchanged": 2, "relabelled": 0}
        assert ledger.counts().negative_flips == 1
        sent = await ledger.add_labels([("a", 0)], relabel=True)
        assert sent == {"accepted": 0, "unmatched": 0, "unchanged": 0, "relabelled": 1}
        assert (ledger.counts().labelled, ledger.counts().negative_flips) == (2, 0)
        await ledger.flush()

    asyncio.run(scenario())
    written = live.run_counts(run_id)  # what the run holds: the labels kept, the relabel the latest
    assert (written.pairs, written.labelled, written.negative_flips) == (2, 2, 0)
    reborn = ledger_module.LiveLedger.func_or_class(run_id, run_id, ServeSettings())  # a restarted replica
    assert {i: entry[3] for i, entry in reborn.window.entries.items()} == {"a": 0, "b": 1}  # each id's label
    record("serving_security", check="labels for ids the session never shadowed are counted and not kept; an id's "
           "first label stands (a later one that would erase a flip changes nothing) unless a relabel is asked, "
           "which is counted and written", passed=True)  # fmt: skip


def test_a_labelled_id_sent_again_with_another_input_changes_nothing_and_is_counted(tmp_path):
    """A client that may only predict sends "a", which is labelled a negative flip; it sends the id
    again with another input whose classes would undo the flip: the live counts do not change, the
    resend is counted (and not written: a restarted replica's figures are the same); the same input
    again is accepted."""
    store.configure()
    run_id = live.start_live_run(f"resend-{tmp_path.name}", "1", "2")
    ledger = ledger_module.LiveLedger.func_or_class(run_id, run_id, ServeSettings(chunk_rows=1000, flush_s=3600))

    async def scenario():
        await ledger.add_pairs([pair("a", 1, 0)])
        await ledger.add_labels([("a", 1)])
        before = ledger.counts()
        assert before.negative_flips == 1
        await ledger.add_pairs([{**pair("a", 1, 1), "digest": "another input", "time": 2.0}])
        assert ledger.counts() == before and ledger.figures()["resent_after_label"] == 1
        await ledger.add_pairs([{**pair("a", 1, 0), "time": 3.0}])  # the same input ("d") again
        assert ledger.counts() == before and ledger.figures()["resent_after_label"] == 1
        await ledger.flush()
        return before

    before = asyncio.run(scenario())
    assert live.run_counts(run_id) == before
    reborn = ledger_module.LiveLedger.func_or_class(run_id, run_id, ServeSettings())
    assert reborn.counts() == before
    record("serving_security", check="a labelled pair is immutable: its id sent again with another input is "
           "refused and counted (resent_after_label), the live counts unchanged; the same input again is "
           "accepted", passed=True)  # fmt: skip


def test_a_relabel_is_asked_with_true_and_nothing_else():
    assert wants_relabel({"labels": []}) is False
    assert wants_relabel({"labels": [], "relabel": True}) is True
    with pytest.raises(RequestError, match="`relabel` is true or false, not 'yes'"):
        wants_relabel({"relabel": "yes"})


def request(method: str, content_type: str | None = None, token: str | None = None) -> Request:
    headers = [(b"content-type", content_type.encode())] if content_type else []
    headers += [(b"authorization", f"Bearer {token}".encode())] if token else []
    return Request({"type": "http", "method": method, "path": "/", "headers": headers, "query_string": b""})


def test_a_post_that_is_not_declared_json_is_refused_before_it_is_read():
    open_endpoint: dict = {}
    for content_type in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data", None):
        refused = refusal(request("POST", content_type), open_endpoint, "feedback")
        assert refused is not None and refused.status_code == 415, content_type
    assert refusal(request("POST", "application/json; charset=utf-8"), open_endpoint, "feedback") is None
    assert refusal(request("GET"), open_endpoint, "predict") is None
    record("serving_security", check="a POST not declared `application/json` (text/plain, a form, multipart, none: "
           "what a web page may send cross-origin without asking) is refused with 415", passed=True)  # fmt: skip


def test_each_scope_asks_for_its_own_token_and_an_unset_one_takes_the_serve_token(monkeypatch):
    for name in access.SCOPE_ENV.values():
        monkeypatch.delenv(name, raising=False)
    assert access.scope_digests() == {"predict": None, "feedback": None, "control": None}
    assert access.shared_scopes() == []
    monkeypatch.setenv(access.TOKEN_ENV, "predict-token")
    assert access.shared_scopes() == ["feedback", "control"]
    assert access.auth_headers("feedback") == {"authorization": "Bearer predict-token"}
    monkeypatch.setenv("CONGRUENT_FEEDBACK_TOKEN", "feedback-token")
    monkeypatch.setenv("CONGRUENT_CONTROL_TOKEN", "control-token")
    assert access.shared_scopes() == []
    digests = access.scope_digests()
    json = "application/json"
    assert refusal(request("POST", json, "predict-token"), digests, "predict") is None
    assert refusal(request("POST", json, "feedback-token"), digests, "feedback") is None
    assert refusal(request("POST", json, "control-token"), digests, "control") is None
    for token, scope in (("predict-token", "feedback"), ("predict-token", "control"), ("feedback-token", "control")):
        refused = refusal(request("POST", json, token), digests, scope)
        assert refused is not None and refused.status_code == 401, (token, scope)
    assert access.auth_headers("control") == {"authorization": "Bearer control-token"}
    record("serving_security", check="the predict token cannot label or swap, the feedback token cannot swap (401): "
           "three scopes with their own tokens", passed=True)  # fmt: skip


def test_the_live_figures_and_the_gateway_s_state_ask_for_the_feedback_token():
    """`GET /live` and `GET /status` (what is served, the canary's state) refuse the predict token:
    a client that may only predict cannot watch how close its requests bring a decision."""
    from orchestrator.serving import deployments

    digests = {scope: access.token_digest(f"{scope}-token") for scope in access.SCOPE_ENV}
    user_class = deployments.Gateway.func_or_class.__mro__[1]  # the class itself, under Serve's ingress wrapper
    gateway = object.__new__(user_class)
    user_class.__init__(gateway, "m", "1", None, None, ServeSettings(), digests)
    for route in (gateway.live, gateway.status):
        refused = asyncio.run(route(request("GET", None, "predict-token")))
        assert refused.status_code == 401 and b"the feedback token" in refused.body, route.__name__
    assert asyncio.run(gateway.live(request("GET", None, "feedback-token"))).status_code == 409  # no shadow
    record("serving_security", check="the live figures (/live) and the gateway's state (/status) ask for the "
           "feedback token; /healthz says only that it answers", passed=True)  # fmt: skip


def test_an_endpoint_on_loopback_answers_only_its_loopback_names():
    """DNS rebinding: a web page whose name now resolves to 127.0.0.1 sends its own name as `Host`;
    served on loopback, the gateway answers 403 to any other name (or none), before the token."""

    def to(host: str | None) -> Request:
        headers = [(b"host", host.encode())] if host is not None else []
        return Request({"type": "http", "method": "GET", "path": "/", "headers": headers, "query_string": b""})

    loopback = access.LOOPBACK
    for host in ("127.0.0.1:8000", "localhost:8000", "[::1]:8000", "localhost"):
        assert refusal(to(host), {}, "predict", loopback) is None, host
    for host in ("attacker.example:8000", "127.0.0.1.attacker.example", None, "[::1"):
        refused = refusal(to(host), {}, "predict", loopback)
        assert refused is not None and refused.status_code == 403, host
    assert refusal(to("attacker.example"), {}, "predict") is None  # served beyond loopback: the token guards it
    record("serving_security", check="an endpoint served on loopback refuses (403) a request whose Host is not a "
           "loopback name: a DNS-rebound web page cannot call it", passed=True)  # fmt: skip


def test_the_fewest_pairs_for_a_wilson_bound_within_a_limit_by_hand():
    from workers.confidence import fewest_for_bound, wilson_upper

    # 0 of n: z²/(n + z²) ≤ limit; z = 1.6449 one-sided at 95 %: n ≥ 2.7055·0.99/0.01 = 267.8
    assert fewest_for_bound(0.01, 0.95) == 268
    assert fewest_for_bound(0.05, 0.95) == 52  # 2.7055·0.95/0.05 = 51.4
    for limit in (0.003, 0.01, 0.04, 0.3):
        n = fewest_for_bound(limit, 0.95)
        assert wilson_upper(0, n, 0.95) <= limit < wilson_upper(0, n - 1, 0.95)
    with pytest.raises(ValueError):
        fewest_for_bound(0.0, 0.95)


def test_a_restarted_serve_continues_the_session_of_the_same_two_versions(tmp_path):
    from mlflow import MlflowClient

    store.configure()
    model = f"continued-{tmp_path.name}"
    first, continued = live.continue_live_run(model, "1", "2")
    assert not continued
    live.write_chunk(first, "pairs", [pair("a", 1, 0)])
    MlflowClient().set_terminated(first, "FINISHED")  # serve stopped
    again, continued = live.continue_live_run(model, "1", "2")
    assert (again, continued) == (first, True) and MlflowClient().get_run(first).info.status == "RUNNING"
    assert live.run_counts(again).pairs == 1  # the evidence so far is the session's still
    other, continued = live.continue_live_run(model, "3", "2")  # beside another champion: its own session
    assert other != first and not continued
    record("serving_security", check="a restarted serve continues the session of the same two versions: an empty "
           "new session cannot hide the live evidence", passed=True)  # fmt: skip


def test_the_ledger_holds_the_last_max_live_ids_ids_and_a_restarted_one_replays_to_the_same(tmp_path, caplog):
    store.configure()
    run_id = live.start_live_run(f"window-{tmp_path.name}", "1", "2")
    settings = ServeSettings(chunk_rows=1000, flush_s=3600, max_live_ids=2)
    ledger = ledger_module.LiveLedger.func_or_class(run_id, run_id, settings)

    async def scenario():
        await ledger.add_pairs([pair("a", 1, 0)])
        assert await ledger.add_labels([("a", 1)]) == {"accepted": 1, "unmatched": 0, "unchanged": 0, "relabelled": 0}
        await ledger.add_pairs([pair("b", 1, 1), pair("c", 0, 0)])  # "a" leaves, its flip stays counted
        late = await ledger.add_labels([("a", 0)], relabel=True)
        assert late == {"accepted": 0, "unmatched": 1, "unchanged": 0, "relabelled": 0}
        await ledger.flush()

    asyncio.run(scenario())
    figures = ledger.figures()
    assert (figures["pairs"], figures["labelled"], figures["negative_flips"], figures["ids_forgotten"]) == (3, 1, 1, 1)
    assert "holds the last 2 ids (--max-live-ids)" in caplog.text
    reborn = ledger_module.LiveLedger.func_or_class(run_id, run_id, settings)
    assert list(reborn.window.entries) == ["b", "c"] and reborn.counts() == ledger.counts()
    record("serving_security", check="the live ledger holds at most --max-live-ids ids in memory, a restarted one "
           "replays its chunks one at a time, and the figures still count every id", passed=True)  # fmt: skip
