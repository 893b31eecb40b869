"""The live ledger's chunks, chained (orchestrator/tracking/live_chain.py, live.py): the chain by
hand; a chunk edited or added after its ledger wrote it is refused in one line, and the ledger's own
restart adopts the one chunk a crash left beyond the tag."""

from __future__ import annotations

import asyncio
import hashlib

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from orchestrator.serving import ledger as ledger_module
from orchestrator.serving.settings import ServeSettings
from orchestrator.tracking import live, store
from orchestrator.tracking.live_chain import LiveChainError, chain_of, chain_tag, checked_chain
from orchestrator.tracking.tags import CHAIN_TAG
from reliability_records import record


def test_the_chain_by_hand():
    first = hashlib.sha256(b"|pairs/a|d1").hexdigest()
    assert chain_of([("pairs/a", "d1")]) == first
    assert (
        chain_of([("pairs/a", "d1"), ("labels/b", "d2")]) == hashlib.sha256(f"{first}|labels/b|d2".encode()).hexdigest()
    )
    chunks = [("pairs/a", "d1"), ("labels/b", "d2")]
    assert chain_tag(chunks) == f"2:{chain_of(chunks)}" and chain_tag([]) == "0:"
    assert checked_chain("r", chain_tag(chunks), chunks, adopt_last=False) is None
    assert checked_chain("r", None, [], adopt_last=False) is None
    assert checked_chain("r", chain_tag(chunks[:1]), chunks, adopt_last=True) == chain_tag(chunks)  # one beyond
    for recorded, adopt in ((chain_tag(chunks[:1]), False), (None, True), (chain_tag([("pairs/a", "x")]), True)):
        with pytest.raises(LiveChainError, match="its 2 live chunks are not the"):
            checked_chain("r", recorded, chunks, adopt_last=adopt)
    with pytest.raises(LiveChainError):  # the same chunks in another order
        checked_chain("r", chain_tag(chunks[::-1]), chunks, adopt_last=False)


def _pair(sample_id: str, champion: int, candidate: int) -> dict:
    return {"id": sample_id, "digest": "d", "time": 1.0, "champion_class": champion, "champion_probability": 0.9,
            "candidate_class": candidate, "candidate_probability": 0.8}  # fmt: skip


def test_an_edited_or_added_chunk_is_refused_and_a_crash_s_last_chunk_adopted(tmp_path):
    """A session with one flip: a chunk rewritten so the flip is gone is refused by every reader
    (one line), as is a chunk added by another writer; a restarted ledger adopts one chunk beyond the
    tag (its own, written before it died) and nothing more."""
    from mlflow import MlflowClient

    store.configure()
    run_id = live.start_live_run(f"chain-{tmp_path.name}", "1", "2")
    ledger = ledger_module.LiveLedger.func_or_class(run_id, run_id, ServeSettings(chunk_rows=1000, flush_s=3600))

    async def scenario():
        await ledger.add_pairs([_pair("a", 1, 0), _pair("b", 1, 1)])
        await ledger.add_labels([("a", 1), ("b", 1)])
        await ledger.flush()

    asyncio.run(scenario())
    client = MlflowClient()
    assert live.run_counts(run_id).negative_flips == 1
    assert client.get_run(run_id).data.tags[CHAIN_TAG].startswith("2:")
    [written] = [f.path for f in client.list_artifacts(run_id, "live/pairs")]
    edited = tmp_path / written.rsplit("/", 1)[1]
    pq.write_table(pa.Table.from_pylist([_pair("a", 1, 1), _pair("b", 1, 1)], schema=live._schemas()["pairs"]), edited)
    client.log_artifact(run_id, str(edited), "live/pairs")  # the same name: the flip erased
    with pytest.raises(LiveChainError, match=f"serving session {run_id}: its 2 live chunks are not the 2"):
        live.run_counts(run_id)
    summary = next(s for s in live.live_summaries(f"chain-{tmp_path.name}", 0.95) if s["run_id"] == run_id)
    assert summary["labelled"] == 0 and "are not the 2 its ledger wrote" in summary["problem"]
    record("serving_security", check="a live chunk edited after its ledger wrote it is refused in one line by "
           "every reader (the session's running sha256 tag no longer matches)", passed=True)  # fmt: skip

    # a fresh session: a chunk a crash left beyond the tag is adopted by the ledger's restart only
    run_id = live.start_live_run(f"chain-{tmp_path.name}", "1", "3")
    live.write_chunk(run_id, "pairs", [_pair("c", 0, 0)])
    tag = client.get_run(run_id).data.tags[CHAIN_TAG]
    live.write_chunk(run_id, "pairs", [_pair("d", 0, 1)])
    client.set_tag(run_id, CHAIN_TAG, tag)  # as if it died before moving the tag
    with pytest.raises(LiveChainError):
        live.run_counts(run_id)
    reborn = ledger_module.LiveLedger.func_or_class(run_id, run_id, ServeSettings())
    assert reborn.counts().pairs == 2 and live.run_counts(run_id).pairs == 2  # adopted, the tag moved
    for name in ("chunk-99999999999999999990-forged00.parquet", "chunk-99999999999999999991-forged01.parquet"):
        forged = tmp_path / name  # another writer's chunks, after the ledger's
        pq.write_table(pa.Table.from_pylist([_pair(name, 0, 0)], schema=live._schemas()["pairs"]), forged)
        client.log_artifact(run_id, str(forged), "live/pairs")
    with pytest.raises(LiveChainError, match="its 4 live chunks are not the 2"):
        live.run_counts(run_id)
    with pytest.raises(LiveChainError):  # two beyond the tag: the ledger's restart adopts none
        ledger_module.LiveLedger.func_or_class(run_id, run_id, ServeSettings())
