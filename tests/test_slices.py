"""Flips by slice (workers/slices.py) against hand-counted values, and `congruent compare --slices`
on prediction files by id: per-slice NFR, worst first, small slices shown but not gated."""

from __future__ import annotations

import json

import numpy as np
import pytest

from orchestrator.cli import main
from workers.data.keys import key_ids
from workers.metrics import FlipCounts
from workers.prediction_files import PredictionWriter
from workers.slices import slice_flip_counts, slice_over_limit, slice_rows, worst_gated_slice

# eight samples: labels, an old and a new model; column "lang" splits them en (0-3) / de (4-7)
LABELS = np.array([0, 1, 0, 1, 0, 1, 0, 1])
OLD = np.array([0, 1, 0, 1, 0, 1, 1, 0])  # right on 0-5
NEW = np.array([0, 1, 0, 0, 1, 0, 0, 1])  # right on 0-2, 6-7: flips 3 (en), 4, 5 (de)
LANG = np.array(["en"] * 4 + ["de"] * 4, dtype=object)


def test_slice_counts_are_the_flips_within_each_value():
    counts = slice_flip_counts(OLD, NEW, LABELS, {"lang": LANG})
    assert counts["lang"]["en"] == FlipCounts(n=4, old_errors=0, new_errors=1, negative=1, positive=0)
    assert counts["lang"]["de"] == FlipCounts(n=4, old_errors=2, new_errors=2, negative=2, positive=2)
    total = counts["lang"]["en"] + counts["lang"]["de"]
    assert total == FlipCounts.of(OLD, NEW, LABELS)  # slices of one column partition the samples


def test_rows_put_the_worst_gated_slice_first_and_never_gate_small_ones():
    counts = slice_flip_counts(OLD, NEW, LABELS, {"lang": LANG, "len": np.array(["", "s"] * 4, dtype=object)})
    rows = slice_rows(counts, confidence=0.95, min_n=4)
    assert [(r["column"], r["value"]) for r in rows[:1]] == [("lang", "de")]  # NFR 2/4
    de = rows[0]
    assert de["nfr"] == 0.5 and de["pfr"] == 0.5 and de["er_old"] == 0.5 and 0.5 < de["nfr_upper"] < 1
    assert {r["value"] for r in rows if r["column"] == "len"} == {"s"}  # "" is in no slice
    assert worst_gated_slice(rows, 0.3, on_bound=False)["value"] == "de"
    assert worst_gated_slice(rows, 0.6, on_bound=False) is None
    small = slice_rows(counts, min_n=5)
    assert not any(r["gated"] for r in small) and worst_gated_slice(small, 0.0, on_bound=True) is None


def test_a_slice_over_the_limit_is_named_as_the_gate_names_it():
    """en NFR 1/4, de 2/4: a 0.3 limit holds en, not de; 0.6 holds both; slices under min_n never count."""
    slices = {"lang": LANG}
    assert slice_over_limit(OLD, NEW, LABELS, slices, 0.3, min_n=4) == "lang=de NFR 50.00% > 30.00% on 4"
    assert slice_over_limit(OLD, NEW, LABELS, slices, 0.6, min_n=4) is None
    assert slice_over_limit(OLD, NEW, LABELS, slices, 0.0, min_n=5) is None
    bounded = slice_over_limit(OLD, NEW, LABELS, slices, 0.6, confidence=0.9, min_n=4)  # 2 of 4: bound > 0.6
    assert bounded is not None and bounded.startswith("lang=de NFR upper bound ")


def write_predictions(folder, keys, labels, classes):
    writer = PredictionWriter(folder)
    n = len(keys)
    writer.write(
        {
            "id": key_ids(keys),
            "label": labels.tolist(),
            "class": classes.tolist(),
            "name": ["c"] * n,
            "probability": [0.5] * n,
            "error": [None] * n,
        }
    )
    writer.close()


def test_compare_with_a_slices_file_gives_each_slice_of_the_pair(tmp_path, capsys):
    keys = [f"row-{i}" for i in range(8)]
    write_predictions(tmp_path / "v1", keys, LABELS, OLD)
    write_predictions(tmp_path / "v2", keys, LABELS, NEW)
    slices = tmp_path / "slices.csv"
    slices.write_text("id,lang\n" + "".join(f"{k},{v}\n" for k, v in zip(keys, LANG)))
    capsys.readouterr()
    argv = ["compare", str(tmp_path / "v1"), str(tmp_path / "v2"), "--slices", str(slices)]
    assert main([*argv, "--json", "--min-slice-n", "4"]) == 0
    result = json.loads(capsys.readouterr().out)
    [pair] = result["slices"]
    by_value = {r["value"]: r for r in pair["slices"]}
    assert by_value["de"]["nfr"] == 0.5 and by_value["en"]["nfr"] == 0.25 and pair["slices"][0]["value"] == "de"
    assert result["pairs"][0]["nfr"] == pytest.approx(3 / 8)
    assert main(argv) == 0
    shown = capsys.readouterr().out
    assert "Worst slices, 0 -> 1" in shown and "de *" in shown  # 4 samples: fewer than 30, not gated


def test_a_slices_file_that_cannot_be_joined_is_one_line(tmp_path, capsys):
    keys = [f"row-{i}" for i in range(8)]
    write_predictions(tmp_path / "v1", keys, LABELS, OLD)
    write_predictions(tmp_path / "v2", keys, LABELS, NEW)
    cases = {
        "no id column": ("name,lang\nrow-0,en\n", "no column 'id'"),
        "no slice column": ("id\nrow-0\n", "no slice column"),
        "an id twice": ("id,lang\nrow-0,en\nrow-0,de\n", "names two rows"),
        "other samples": ("id,lang\nelse,en\n", "names none of the 8"),
    }
    for case, (text, words) in cases.items():
        path = tmp_path / "slices.csv"
        path.write_text(text)
        capsys.readouterr()
        assert main(["compare", str(tmp_path / "v1"), str(tmp_path / "v2"), "--slices", str(path)]) == 2, case
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and words in err, (case, err)


def test_eval_samples_take_their_values_from_the_table_and_the_slices_file(tmp_path):
    from orchestrator.dataplane.slice_reads import SliceSource, sample_slice_values
    from workers.data.keys import text_keys

    table = tmp_path / "reviews.csv"
    table.write_text("text,label,lang\n good film ,1,en\nmauvais,0,fr\nschön,1,de\n")
    slices = tmp_path / "slices.jsonl"
    slices.write_text('{"id": "mauvais", "source": "web"}\n{"id": "good film", "source": "app"}\n')
    ids = key_ids(text_keys(["schön", "good film", "mauvais", "not in the table"]))
    values = sample_slice_values(ids, SliceSource(str(table), "text", None, "utf-8", ("lang",), str(slices)))
    assert values["lang"].tolist() == ["de", "en", "fr", ""]  # by stripped text, whatever the order
    assert values["source"].tolist() == ["", "app", "web", ""]
    assert sample_slice_values(ids, SliceSource(str(table), "text", None, "utf-8", (), None)) is None
