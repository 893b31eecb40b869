"""The live ledger's window (tracking/live_window.py): each id's latest pair and its first label (a
relabel when asked), counted as `live_counts` counts them, with only the last ids in memory and the
totals over all of them."""

from __future__ import annotations

import numpy as np
import pytest

from orchestrator.tracking.live import live_counts
from orchestrator.tracking.live_window import LiveWindow, contribution, replay


def test_one_id_s_share_of_each_count_by_hand():
    # (pairs, disagreements, labelled, champion errors, candidate errors, negative flips, positive flips)
    assert contribution(1, 2, 1) == (1, 1, 1, 0, 1, 1, 0)  # champion right, candidate wrong: a negative flip
    assert contribution(0, 1, 1) == (1, 1, 1, 1, 0, 0, 1)  # a positive flip
    assert contribution(1, 1, 2) == (1, 0, 1, 1, 1, 0, 0)  # both wrong
    assert contribution(2, 2, -1) == (1, 0, 0, 0, 0, 0, 0)  # unlabelled


def test_the_window_counts_what_live_counts_counts_on_each_id_s_latest_pair_and_first_label():
    window = LiveWindow()
    for sample_id, time, champion, candidate in [
        ("a", 1.0, 0, 0), ("b", 1.0, 1, 1), ("a", 3.0, 0, 1), ("c", 2.0, 2, 2), ("a", 2.0, 5, 5),  # a: t 3 stands
    ]:  # fmt: skip
        window.add_pair(sample_id, time, champion, candidate)
    outcomes = [window.add_label(i, k) for i, k in [("a", 0), ("b", 2), ("a", 1), ("never", 0), ("b", 2)]]
    assert outcomes == ["accepted", "accepted", "unchanged", "unmatched", "unchanged"]
    assert window.add_label("b", 1, relabel=True) == "relabelled"
    assert window.counts() == live_counts(np.array([0, 1, 2]), np.array([1, 1, 2]), np.array([0, 1, -1]))


def test_ids_that_leave_the_window_stay_counted_and_a_label_for_one_is_unmatched():
    window = LiveWindow(max_ids=2)
    window.add_pair("a", 1.0, 1, 2)
    window.add_label("a", 1)  # a negative flip, counted before "a" leaves
    window.add_pair("b", 2.0, 0, 0)
    window.add_pair("c", 3.0, 3, 3)  # "a" leaves
    assert list(window.entries) == ["b", "c"] and window.forgotten == 1
    assert window.add_label("a", 2, relabel=True) == "unmatched"
    assert window.add_label("b", 0) == "accepted"
    counts = window.counts()
    assert (counts.pairs, counts.labelled, counts.negative_flips, counts.disagreements) == (3, 2, 1, 1)
    window.add_pair("b", 4.0, 0, 0)  # "b" again: now the newest, so "c" leaves next
    window.add_pair("d", 5.0, 1, 1)
    assert list(window.entries) == ["b", "d"] and window.counts().pairs == 4
    with pytest.raises(ValueError, match="at least 1 id"):
        LiveWindow(max_ids=0)


def test_a_replay_of_the_chunks_in_the_order_written_gives_the_ledger_s_figures():
    live_window, chunks = LiveWindow(max_ids=3), []
    for step in range(6):  # pairs and then the labels kept, chunk by chunk, as the ledger writes them
        pairs = [{"id": f"s{step}-{i}", "time": float(step), "champion_class": i, "candidate_class": (i * step) % 3}
                 for i in range(2)]  # fmt: skip
        for row in pairs:
            live_window.add_pair(row["id"], row["time"], row["champion_class"], row["candidate_class"])
        labels = [{"id": row["id"], "label": 1} for row in pairs if live_window.add_label(row["id"], 1) == "accepted"]
        chunks += [("pairs", pairs), ("labels", labels)]
    replayed = replay(LiveWindow(max_ids=3), chunks)
    assert replayed.counts() == live_window.counts() and list(replayed.entries) == list(live_window.entries)
