"""Flips by slice between registered versions (issue 74): real tweets in a table with two slice
columns (the first @mention, a length bucket), two text-bag versions trained through the pipeline.
Each ledger keeps its eval samples' slice values; `versions --slices` gives per-slice NFR whose
slices add up to the pair's global counts; `compare --slices` on the two ledgers gives the same rows;
a version whose global NFR passes the gate but whose worst slice does not is refused by
`--max-slice-nfr` naming that slice; `congruent check` refuses slices that cannot be read."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from conftest import run_update
from orchestrator.cli import main
from orchestrator.tracking import registry
from orchestrator.tracking.ledger import pair_counts, read_ledger
from orchestrator.tracking.slice_figures import SLICED
from orchestrator.tracking.version_refs import VersionRef
from workers.data.keys import key_ids, text_keys


def mention(text: str) -> str:
    found = re.match(r"@(\w+)", text)
    return found[1].lower() if found else "none"


@pytest.fixture(scope="module")
def sliced_versions(ray_cluster, tmp_path_factory):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from workers.data.text_tables import load_tweet_sentiment

    tweets = load_tweet_sentiment()
    rows = range(0, 3000 * 12, 12)
    texts = [tweets.texts[i] for i in rows]
    table = {
        "text": texts,
        "sentiment": [tweets.classes[int(tweets.labels[i])] for i in rows],
        "mention": [mention(t) for t in texts],
        "length": ["short" if len(t) < 70 else "long" for t in texts],
    }
    tmp = tmp_path_factory.mktemp("slices")
    pq.write_table(pa.table(table), tmp / "tweets.parquet")
    model = f"sliced-{tmp.name}"[-60:]
    for seed, epochs, version in ((0, 1, "v1"), (1, 3, "v2")):
        document = {
            "model": model,
            "version": version,
            "arch": "text-bag",
            "method": {"name": "none"},
            "data": {
                "path": str(tmp / "tweets.parquet"),
                "label_column": "sentiment",
                "slice_columns": ["mention", "length"],
            },
            "train": {"epochs": epochs, "lr": 0.5, "batch_size": 64, "seed": seed},
            "resources": {"student": {"cpus": 1}, "teacher_actors": 0, "fresh_stage_workers": False},
            "storage": str(tmp / "storage"),
            **({"old": f"{model}/1"} if version == "v2" else {}),
        }
        run_update(document, tmp / version)
    return model, tmp, table


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([*argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def ledger(model: str, version: str) -> dict:
    return read_ledger(registry.ledger_path(registry.run_of(VersionRef(model, version))), SLICED)


def test_ledgers_keep_slices_and_versions_shows_flips_by_slice(sliced_versions, capsys):
    model, _, table = sliced_versions
    new = ledger(model, "2")
    by_id = dict(zip(key_ids(text_keys(table["text"])).tolist(), table["mention"]))
    assert set(new["slices"]) == {"mention", "length"}
    assert [by_id[i] for i in new["ids"].tolist()] == new["slices"]["mention"].tolist()  # each sample's own value

    code, stdout, err = cli(capsys, "versions", model, "--slices", "--min-slice-n", "20", "--json")
    assert code == 0, err
    rows = json.loads(stdout)["slices"]["2"]["vs_parent"]
    whole = pair_counts(ledger(model, "1"), new)
    for column in ("mention", "length"):  # the values of one column partition the shared samples
        mine = [r for r in rows if r["column"] == column]
        assert sum(r["n"] for r in mine) == whole.n
        assert sum(round(r["nfr"] * r["n"]) for r in mine) == whole.negative
    assert {r["value"] for r in rows if r["column"] == "length"} == {"short", "long"}
    code, stdout, _ = cli(capsys, "versions", model, "--slices")
    assert "v2 against its parent:" in stdout and "mention" in stdout


def test_compare_on_the_ledgers_gives_the_same_slices(sliced_versions, capsys, tmp_path):
    model, _, table = sliced_versions
    slices = tmp_path / "slices.csv"
    import pyarrow as pa
    import pyarrow.csv as pacsv

    keys = text_keys(table["text"])
    unique = dict(zip(keys, zip(table["mention"], table["length"])))
    pacsv.write_csv(
        pa.table(
            {"id": list(unique), "mention": [v[0] for v in unique.values()], "length": [v[1] for v in unique.values()]}
        ),
        slices,
    )
    paths = [str(registry.ledger_path(registry.run_of(VersionRef(model, v)))) for v in ("1", "2")]
    code, stdout, err = cli(capsys, "compare", *paths, "--slices", str(slices), "--min-slice-n", "20", "--json")
    assert code == 0, err
    compared = {(r["column"], r["value"]): (r["n"], r["nfr"]) for r in json.loads(stdout)["slices"][0]["slices"]}
    code, stdout, _ = cli(capsys, "versions", model, "--slices", "--min-slice-n", "20", "--json")
    shown = {(r["column"], r["value"]): (r["n"], r["nfr"]) for r in json.loads(stdout)["slices"]["2"]["vs_parent"]}
    assert compared.keys() == shown.keys() and len(shown) > 5
    for key, (n, nfr) in shown.items():
        assert compared[key][0] == n and compared[key][1] == pytest.approx(nfr), key


def test_a_slice_over_its_limit_is_refused_by_name_while_the_global_nfr_passes(sliced_versions, capsys):
    model, _, _ = sliced_versions
    assert cli(capsys, "promote", model, "1", "--max-nfr", "1")[0] == 0  # v1 champion
    code, stdout, _ = cli(capsys, "versions", model, "--slices", "--min-slice-n", "20", "--json")
    rows = json.loads(stdout)["slices"]["2"]["vs_champion"]
    worst = max((r for r in rows if r["gated"]), key=lambda r: r["nfr"])
    nfr = pair_counts(ledger(model, "1"), ledger(model, "2")).report()["nfr"]
    assert worst["nfr"] > nfr  # a partition's worst part is above its mean unless all are equal
    limits = ["--max-nfr", f"{nfr + 0.001:.4f}", "--max-er-increase", "1", "--min-slice-n", "20"]
    code, _, err = cli(capsys, "promote", model, "2", *limits, "--max-slice-nfr", f"{(nfr + worst['nfr']) / 2:.4f}")
    assert code == 1, err
    assert f"slice {worst['column']}={worst['value']} NFR" in err and "NOT promoted" in err
    code, out, err = cli(capsys, "promote", model, "2", *limits, "--max-slice-nfr", f"{worst['nfr'] + 0.001:.4f}")
    assert code == 0, err
    assert f"worst slice {worst['column']}={worst['value']}" in out


def test_check_refuses_slices_it_cannot_read_in_one_line_each(sliced_versions, capsys, tmp_path):
    model, folder, _ = sliced_versions
    duplicated = tmp_path / "dup.csv"
    duplicated.write_text("id,topic\na,x\na,y\n")
    elsewhere = tmp_path / "elsewhere.csv"
    elsewhere.write_text("id,topic\nnot a tweet here,x\n")
    base = {
        "model": model,
        "version": "v9",
        "arch": "text-bag",
        "method": {"name": "none"},
        "storage": str(tmp_path / "storage"),
    }
    data = {"path": str(folder / "tweets.parquet"), "label_column": "sentiment"}
    cases = {
        "a missing slice column": (
            {**data, "slice_columns": ["country"]},
            {},
            "data.slice_columns: ",
            "no column 'country'",
        ),
        "ids of other samples": ({**data, "slices": str(elsewhere)}, {}, "data.slices: ", "names none of the"),
        "ids of other samples, streamed": (
            {**data, "slices": str(elsewhere), "streaming": True},
            {},
            "data.slices: ",
            "names none of the",
        ),
        "an id named twice": ({**data, "slices": str(duplicated)}, {}, "data.slices: ", "names two rows"),
        "a slice gate without slices": (
            data,
            {"promote": {"max_nfr": 0.1, "max_slice_nfr": 0.1}},
            "promote.max_slice_nfr: ",
            "names no slices",
        ),
    }
    for case, (section, extra, field, words) in cases.items():
        spec = tmp_path / "spec.yaml"
        spec.write_text(yaml.safe_dump({**base, "data": section, **extra}))
        code, _, err = cli(capsys, "check", str(spec))
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and field in lines[0] and words in lines[0], (case, err)


def test_the_report_draws_the_worst_slices(sliced_versions, capsys, tmp_path):
    from orchestrator.driver.report import gather

    model, _, _ = sliced_versions
    data = gather(model, "2")
    assert data.per_slice and data.per_slice[0]["gated"]  # the worst gated slice first
    assert data.per_slice == sorted(
        data.per_slice, key=lambda r: (not r["gated"], -r["nfr_upper"], -r["nfr"], r["column"], r["value"])
    )
    code, _, err = cli(capsys, "report", model, "--version", "2", "--out", str(tmp_path / "report.html"))
    assert code == 0, err
    assert 'alt="per-slice NFR"' in (tmp_path / "report.html").read_text()


def test_auto_holds_its_candidates_to_the_slice_gate_on_val(sliced_versions, capsys):
    """v3 auto (kd) from v2 with promote.max_slice_nfr 0: any negative flip in a val slice of 20+
    samples makes a candidate ineligible, whatever its val ER; no treatment stays eligible. Each
    named slice is one the val split has, and the check says auto takes the limit."""
    model, folder, table = sliced_versions
    document = {
        "model": model,
        "version": "v3",
        "arch": "text-bag",
        "old": f"{model}/2",
        "method": {"name": "auto", "candidates": ["kd"], "max_er_increase": 1.0},
        "data": {"path": str(folder / "tweets.parquet"), "label_column": "sentiment", "slice_columns": ["length"]},
        "train": {"epochs": 2, "lr": 0.5, "batch_size": 64, "seed": 3},
        "resources": {"student": {"cpus": 1}, "teacher_actors": 0, "fresh_stage_workers": False},
        "storage": str(folder / "storage"),
        "promote": {"max_nfr": 1.0, "max_er_increase": 1.0, "max_slice_nfr": 0.0, "min_slice_n": 20},
    }
    spec = folder / "auto.yaml"
    spec.write_text(yaml.safe_dump(document))
    code, stdout, err = cli(capsys, "check", str(spec))
    assert code == 0, err
    assert "and no val slice of 20+ samples with NFR above 0% (promote.max_slice_nfr)" in stdout
    result = run_update(document, folder / "v3")
    scores = {c["name"]: c for c in result.auto["candidates"]}
    kd = scores["kd"]
    named = re.fullmatch(r"length=(short|long) NFR [\d.]+% > 0\.00% on \d+", kd["val_slice_over"] or "")
    assert named, kd["val_slice_over"]
    assert not kd["eligible"] and scores["none"]["eligible"] and result.auto["chosen"] == "none"
    code, stdout, _ = cli(capsys, "versions", model)
    assert code == 0 and f"val slice {kd['val_slice_over']}" in stdout
