"""Data growth end to end (issue 49): v1 trained on a table, v2 on that table plus new rows (held
in memory) or on more shards (streamed), `old:` v1 from the registry. Preflight accepts it, v2's
flips re-run v1 on v2's eval split, and the chain matrix counts each pair on the eval samples both
versions share — equal to `congruent compare` of the two ledgers' predictions on those ids."""

import json
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from orchestrator.cli import main
from orchestrator.tracking.ledger import shared_samples
from orchestrator.tracking.registry import VersionRef, ledger_of
from pipelines.spec import SpecError

TRAIN = {"epochs": 1, "batch_size": 64}
RESOURCES = {"replica": {"cpus": 1}, "student": {"cpus": 1}, "teacher_actors": 0, "fresh_stage_workers": False}


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    """4,500 real tweets drawn from the whole corpus (it is sorted by label): v1's 3,000 rows; v2's
    table, those rows and 1,500 new ones in another order; the same as shards: v1's two, v2's three."""
    from workers.data.text_tables import load_tweet_sentiment

    corpus = load_tweet_sentiment()
    picked = corpus.take(torch.from_numpy(np.random.default_rng(7).permutation(len(corpus))[:4500]))

    def table(rows):
        rows = list(rows)
        return pa.table(
            {
                "text": [picked.texts[i] for i in rows],
                "sentiment": [picked.classes[int(picked.labels[i])] for i in rows],
            }
        )

    folder = tmp_path_factory.mktemp("growth")
    pq.write_table(table(range(3000)), folder / "v1.parquet")
    pq.write_table(table(np.random.default_rng(0).permutation(4500)), folder / "v2.parquet")
    for name, rows in (("v1", ((0, 1500), (1500, 3000))), ("v2", ((0, 1500), (1500, 3000), (3000, 4500)))):
        (folder / name).mkdir()
        for shard, (start, stop) in enumerate(rows):
            pq.write_table(table(range(start, stop)), folder / name / f"part-{shard}.parquet")
    return folder


def _spec(tmp_path, model, version, path, streaming, **fields):
    return {
        "model": model,
        "version": version,
        "arch": "text-linear",
        "method": {"name": "none"},
        "data": {"path": str(path), "label_column": "sentiment", "streaming": streaming},
        "storage": str(tmp_path / "storage"),
        "train": TRAIN,
        "tokenizer": {"vocab_size": 2000, "max_length": 32},
        "resources": RESOURCES,
        **fields,
    }


@pytest.mark.parametrize("streaming", [False, True], ids=["held", "streamed"])
def test_v2_on_grown_data_against_v1_from_the_registry(ray_cluster, tables, tmp_path, capsys, streaming):
    from conftest import run_update

    model = f"growth-{'streamed' if streaming else 'held'}"
    v1_path = tables / ("v1/*.parquet" if streaming else "v1.parquet")
    v2_path = tables / ("v2/*.parquet" if streaming else "v2.parquet")
    v1 = run_update(_spec(tmp_path, model, "v1", v1_path, streaming), tmp_path / "v1")
    v2 = run_update(_spec(tmp_path, model, "v2", v2_path, streaming, old=f"{model}/1"), tmp_path / "v2")
    assert (v1.registered_version, v2.registered_version) == ("1", "2")
    first, second = ledger_of(VersionRef(model, "1")), ledger_of(VersionRef(model, "2"))
    assert not first["positional"] and len(second["ids"]) > len(first["ids"])
    assert set(first["ids"].tolist()) <= set(second["ids"].tolist())  # v1's eval samples kept their split
    # the update's own NFR re-runs v1 on v2's whole eval split
    assert v2.metrics["vs_old"]["n"] == len(second["ids"])

    assert main(["versions", model, "--matrix", "--json"]) == 0
    matrix = json.loads(capsys.readouterr().out)["matrix"]
    assert matrix["versions"] == ["1", "2"] and matrix["shared_samples"][0][1] == len(first["ids"])
    # `congruent compare` of the two ledgers' predictions on the ids both hold (copies of a text
    # share an id: `shared_samples` pairs them), aligned
    order = shared_samples(first, second)
    assert np.array_equal(first["ids"][order[0]], second["ids"][order[1]])
    np.save(tmp_path / "labels.npy", second["labels"][order[1]])
    for name, ledger, rows in (("v1", first, order[0]), ("v2", second, order[1])):
        np.save(tmp_path / f"{name}.npy", ledger["class_ids"][rows].astype(np.int64))
    argv = ["compare", "--labels", str(tmp_path / "labels.npy"), str(tmp_path / "v1.npy"), str(tmp_path / "v2.npy")]
    assert main([*argv, "--json"]) == 0
    compared = json.loads(capsys.readouterr().out)
    assert compared["n"] == len(first["ids"])
    assert matrix["nfr_matrix"][0][1] == pytest.approx(compared["nfr_matrix"][0][1], abs=1e-12)


def test_an_old_version_evaluated_on_other_samples_is_refused_in_one_line(ray_cluster, tables, tmp_path):
    """v1 on the first 1,500 rows, a v2 spec on 1,500 others: they share only the few tweets the
    corpus repeats."""
    from conftest import run_update
    from orchestrator.planning.preflight import preflight
    from pipelines.spec import parse_spec

    run_update(_spec(tmp_path, "disjoint", "v1", tables / "v1" / "part-0.parquet", False), tmp_path / "v1")
    other = _spec(tmp_path, "disjoint", "v2", tables / "v2" / "part-2.parquet", False, old="disjoint/1")
    with pytest.raises(SpecError) as caught:
        preflight(parse_spec(other))
    (line,) = caught.value.problems
    assert re.search(r"evaluated on \d+ samples, this spec's eval split has \d+, and they share \d: at least 50%", line)
