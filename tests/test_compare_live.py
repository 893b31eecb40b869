"""A serving session's live ledger compares by sample id (orchestrator/tracking/live.py
`live_predictions`): `congruent compare live:RUN/champion live:RUN/candidate` gives the flips the
ledger's own figures count, and a side of it meets a `congruent predict` file whose ids are the same
request ids (`--id-column`)."""

from __future__ import annotations

import json

import pytest

from orchestrator.cli import main
from orchestrator.tracking import live
from workers.data.keys import key_ids
from workers.prediction_files import PredictionWriter


@pytest.fixture
def session(tmp_path):
    """A live ledger: five requests, one answered twice (the latest counts), four labelled."""
    from orchestrator.tracking.store import configure

    configure()
    run = live.start_live_run(f"compare-live-{tmp_path.name}"[-60:], "1", "2")

    def pair(i: str, champion: int, candidate: int) -> dict:
        return {
            "id": i,
            "digest": "",
            "time": 0.0,
            "champion_class": champion,
            "champion_probability": 0.9,
            "candidate_class": candidate,
            "candidate_probability": 0.8,
        }

    live.write_chunk(run, "pairs", [pair("a", 0, 0), pair("b", 1, 2), pair("c", 2, 1), pair("d", 0, 1)])
    live.write_chunk(run, "pairs", [pair("e", 1, 1), pair("d", 0, 0)])  # d answered again: both right now
    live.write_chunk(run, "labels", [{"id": i, "label": k, "time": 0.0} for i, k in zip("abcd", (0, 1, 1, 0))])
    return run


def compare(capsys, *refs: str) -> dict:
    capsys.readouterr()
    code = main(["compare", *refs, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out)


def test_the_two_sides_of_a_session_compare_as_its_own_figures_count(session, capsys):
    result = compare(capsys, f"live:{session}/champion", f"live:{session}/candidate")
    counts = live.run_counts(session)
    assert result["n"] == counts.labelled == 4
    assert result["pairs"][0]["nfr"] == pytest.approx(counts.negative_flips / counts.labelled) == 0.25  # b
    assert result["pairs"][0]["pfr"] == pytest.approx(counts.positive_flips / counts.labelled) == 0.25  # c
    assert result["error_rate"] == pytest.approx([counts.champion_errors / 4, counts.candidate_errors / 4])


def test_a_side_of_a_session_meets_prediction_files_by_request_id(session, capsys, tmp_path):
    writer = PredictionWriter(tmp_path / "v3")
    ids = ["a", "b", "c", "d", "zz"]  # zz: never served
    writer.write(
        {
            "id": key_ids(ids),
            "label": [0, 1, 1, 0, 2],
            "class": [1, 1, 1, 0, 2],
            "name": ["x"] * 5,
            "probability": [0.5] * 5,
            "error": [None] * 5,
        }
    )
    writer.close()
    result = compare(capsys, f"live:{session}/candidate", str(tmp_path / "v3"))
    assert result["n"] == 4  # a-d: the requests both answered with a label
    assert result["pairs"][0]["nfr"] == pytest.approx(0.25)  # a: the candidate right, v3 wrong
    assert result["pairs"][0]["pfr"] == pytest.approx(0.25)  # b: the candidate wrong, v3 right


def test_a_live_reference_that_names_no_session_is_one_line(session, capsys):
    for ref, words in (
        (f"live:{session}/paragon", "name a side"),
        ("live:0123456789abcdef/champion", "no run"),
    ):
        capsys.readouterr()
        assert main(["compare", ref, f"live:{session}/candidate"]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and words in err, err


def test_a_session_counts_flips_by_slice_as_its_own_pairs_do(session, capsys, tmp_path):
    """Live flips by slice: the sides of a session joined with a slices file by request id give, per
    slice, the counts of the session's own pairs and labels of that slice."""
    slices = tmp_path / "slices.csv"
    slices.write_text("id,region\na,eu\nb,eu\nc,us\nd,us\ne,us\n")
    result = compare(capsys, f"live:{session}/champion", f"live:{session}/candidate", "--slices", str(slices))
    rows = {r["value"]: r for r in result["slices"][0]["slices"]}
    # eu: a (both right), b (champion right, candidate wrong); us: c (a positive flip), d (both right)
    assert rows["eu"]["n"] == 2 and rows["eu"]["nfr"] == 0.5 and rows["eu"]["pfr"] == 0
    assert rows["us"]["n"] == 2 and rows["us"]["nfr"] == 0 and rows["us"]["pfr"] == 0.5
    counts = live.run_counts(session)
    assert sum(round(r["nfr"] * r["n"]) for r in rows.values()) == counts.negative_flips
