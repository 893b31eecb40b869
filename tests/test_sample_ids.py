"""Samples by identity (issue 49): one split rule for held and streamed data, so a sample keeps its
split when rows or shards are added and when `streaming` changes; subsets and limits are filters of
ids on both paths; `data.id_column` names samples; a shard changed after preflight is refused."""

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
import torch

from orchestrator.dataplane.table_streams import open_table_stream
from orchestrator.dataplane.table_tasks import TableReading, shard_rows
from workers.data.dataset_splits import load_splits
from workers.data.keys import EVAL, LIMIT_SEED, key_ids, rank, split_codes, text_keys
from workers.data.text_tables import load_tweet_sentiment
from workers.errors import DataError


@pytest.fixture(scope="module")
def tweets():
    """4,000 real tweets (every 9th of the corpus), and 1,500 more (the rows of a later version)."""
    corpus = load_tweet_sentiment()
    picked = torch.arange(0, len(corpus), 9)[:5500]
    data = corpus.take(picked)
    return data.take(slice(0, 4000)), data.take(slice(4000, 5500))


def _table(data, order=None, **extra):
    order = range(len(data)) if order is None else order
    return pa.table(
        {
            "text": [data.texts[i] for i in order],
            "sentiment": [data.classes[int(data.labels[i])] for i in order],
            **{name: [values[i] for i in order] for name, values in extra.items()},
        }
    )


def _ids_by_split(splits):
    return {name: set(getattr(splits, name).ids.tolist()) for name in ("train", "val", "eval")}


def test_held_and_streamed_splits_of_one_table_hold_the_same_samples(tmp_path, tweets):
    """One CSV read whole and streamed: the same ids (and labels) in every split, with a subset and
    both limits too; the split follows `split_codes` of the text's id."""
    old, _ = tweets
    path = tmp_path / "tweets.parquet"
    pq.write_table(_table(old), path)
    chosen = {"subset": "half-samples", "train_limit": 900, "eval_limit": 300}
    for options in ({}, chosen):
        held = load_splits(str(path), label_column="sentiment", **options)
        streamed = open_table_stream(str(path), label_column="sentiment", **options)
        assert _ids_by_split(held) == _ids_by_split(streamed), options
        for name in ("train", "val", "eval"):
            a, b = getattr(held, name), getattr(streamed, name)
            assert sorted(zip(a.ids.tolist(), a.labels.tolist())) == sorted(zip(b.ids.tolist(), b.labels.tolist()))
    codes = split_codes(key_ids(text_keys(old.texts)), 0.1, 0.2)
    whole = load_splits(str(path), label_column="sentiment")
    assert set(whole.eval.ids.tolist()) == set(old.ids[torch.from_numpy(codes == EVAL)].tolist())
    limited = load_splits(str(path), label_column="sentiment", **chosen)
    assert (len(limited.train), len(limited.eval)) == (900, 300)
    ranks = rank(whole.eval.ids.numpy(), LIMIT_SEED)  # the limit keeps the lowest-ranked ids
    assert set(limited.eval.ids.tolist()) == set(whole.eval.ids[np.argsort(ranks, kind="stable")[:300]].tolist())


def test_rows_and_shards_added_keep_every_old_samples_split(tmp_path, tweets):
    """v2's table is v1's rows plus 1,500 new ones, shuffled; v2's shards are v1's plus one more:
    every sample of v1 lands in the same split in v2, held or streamed, and v1's eval split is a
    subset of v2's."""
    old, new = tweets
    pq.write_table(_table(old), tmp_path / "v1.parquet")
    both = old.take(slice(0, 4000))
    grown = pa.concat_tables([_table(old), _table(new)])
    shuffled = grown.take(np.random.default_rng(0).permutation(grown.num_rows))
    pq.write_table(shuffled, tmp_path / "v2.parquet")
    (tmp_path / "shards").mkdir()
    pq.write_table(_table(old, range(0, 2000)), tmp_path / "shards" / "part-0.parquet")
    pq.write_table(_table(old, range(2000, 4000)), tmp_path / "shards" / "part-1.parquet")
    v1_held = load_splits(str(tmp_path / "v1.parquet"), label_column="sentiment")
    v1_streamed = open_table_stream(str(tmp_path / "shards" / "*.parquet"), label_column="sentiment")
    pq.write_table(_table(new), tmp_path / "shards" / "part-2.parquet")
    v2_held = load_splits(str(tmp_path / "v2.parquet"), label_column="sentiment")
    v2_streamed = open_table_stream(str(tmp_path / "shards" / "*.parquet"), label_column="sentiment")
    assert _ids_by_split(v1_held) == _ids_by_split(v1_streamed)
    assert _ids_by_split(v2_held) == _ids_by_split(v2_streamed)
    for v1, v2 in ((v1_held, v2_held), (v1_streamed, v2_streamed)):
        before, after = _ids_by_split(v1), _ids_by_split(v2)
        for name in ("train", "val", "eval"):
            assert before[name] <= after[name], name  # old samples kept their split
            assert len(after[name]) > len(before[name])  # and new ones joined it
    assert len(both) == 4000


def test_an_id_column_names_the_samples_on_both_paths(tmp_path, tweets):
    old, _ = tweets
    review_ids = [f"r{i:05d}" for i in range(len(old))]
    path = tmp_path / "named.csv"
    pacsv.write_csv(_table(old, review_id=review_ids), path)
    held = load_splits(str(path), label_column="sentiment", id_column="review_id")
    streamed = open_table_stream(str(path), label_column="sentiment", id_column="review_id")
    assert _ids_by_split(held) == _ids_by_split(streamed)
    everything = set().union(*_ids_by_split(held).values())
    assert everything == set(key_ids(review_ids).tolist())
    copied = _table(old, review_id=["r00001"] + review_ids[1:])
    pacsv.write_csv(copied, tmp_path / "twice.csv")
    with pytest.raises(DataError, match="the id 'r00001' names two rows of column 'review_id'"):
        load_splits(str(tmp_path / "twice.csv"), label_column="sentiment", id_column="review_id")
    with pytest.raises(DataError, match="name more than one row"):
        open_table_stream(str(tmp_path / "twice.csv"), label_column="sentiment", id_column="review_id")
    with pytest.raises(DataError, match="no id column 'id'"):
        load_splits(str(path), label_column="sentiment", id_column="id")
    with pytest.raises(DataError, match="no column 'id'"):
        open_table_stream(str(path), label_column="sentiment", id_column="id")


def test_a_shard_changed_after_preflight_is_refused_when_read(tmp_path, tweets):
    """The same row count with other labels would have corrupted ER and NFR silently; the reading
    task compares the shard's checksum with the one preflight took."""
    old, _ = tweets
    path = tmp_path / "part-0.parquet"
    rows = range(0, 4000, 7)  # the corpus is sorted by label: every 7th row holds all three
    pq.write_table(_table(old, rows), path)
    splits = open_table_stream(str(path), label_column="sentiment")
    from workers.data.tokenizer import text_input

    inputs = text_input(old.texts[:1000], vocab_size=500, max_length=16)
    reading: TableReading = splits.eval.reading
    read = list(shard_rows({"file": np.array([str(path)])}, reading, inputs))
    assert sum(len(r["id"]) for r in read) == len(splits.eval)
    relabelled = _table(old, rows).set_column(1, "sentiment", pa.array(["negative", "positive"] * 286))
    pq.write_table(relabelled, path)
    with pytest.raises(DataError, match="the shard changed after preflight"):
        list(shard_rows({"file": np.array([str(path)])}, reading, inputs))
