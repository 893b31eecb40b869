"""Text tables (CSV, TSV, JSONL, Parquet) read into TextSets, their one-line errors, duplicate
groups, and the tweet-sentiment corpus that `make system-data` installs."""

import json

import numpy as np
import pytest
import torch

from workers.data.text import TextSet, text_fingerprint
from workers.data.text_tables import load_tweet_sentiment, read_text_table, tweet_sentiment_csv
from workers.errors import DataError

ROWS = [("good film", "pos"), ("bad film", "neg"), ("fine, I guess", "neu"), ("great", "pos")]


def write_rows(path, rows, columns=("text", "label")):
    """`rows` as a table in the format of `path`'s suffix."""
    if path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({c: [r[i] for r in rows] for i, c in enumerate(columns)}), path)
    elif path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(dict(zip(columns, r))) + "\n" for r in rows), encoding="utf-8")
    else:
        sep = "\t" if path.suffix == ".tsv" else ","
        quote = (lambda v: f'"{v}"' if sep in str(v) else str(v)) if sep == "," else str
        lines = [sep.join(columns)] + [sep.join(quote(v) for v in r) for r in rows]
        path.write_text("\r\n".join(lines) + "\r\n", encoding="utf-8")
    return path


def error_of(path, **kwargs):
    with pytest.raises(DataError) as caught:
        read_text_table(path, **kwargs)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(str(path))
    return message


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".jsonl", ".parquet"])
def test_each_format_reads_names_and_integer_labels(tmp_path, suffix):
    named = read_text_table(write_rows(tmp_path / f"named{suffix}", ROWS))
    assert named.texts == tuple(t for t, _ in ROWS)
    assert named.classes == ("neg", "neu", "pos")  # sorted names; ids follow that order
    assert named.labels.tolist() == [2, 0, 1, 2] and named.labels.dtype == torch.int64
    assert len(named) == 4 and named.num_classes == 3 and named.modality == "text"
    numbered = read_text_table(write_rows(tmp_path / f"ids{suffix}", [(t, i % 2) for i, (t, _) in enumerate(ROWS)]))
    assert numbered.labels.tolist() == [0, 1, 0, 1] and numbered.classes == ("0", "1")
    assert text_fingerprint(numbered) == text_fingerprint(TextSet(numbered.texts, numbered.labels))


def test_integer_labels_follow_the_image_rule(tmp_path):
    gap = write_rows(tmp_path / "gap.csv", [("a", 0), ("b", 2), ("c", 2)])
    assert "without gaps" in error_of(gap) and "(1)" in error_of(gap)
    assert read_text_table(gap, num_classes=4).classes == ("0", "1", "2", "3")
    assert "not below data.num_classes = 2" in error_of(gap, num_classes=2)
    assert "negative class id -1" in error_of(write_rows(tmp_path / "neg.csv", [("a", 0), ("b", -1)]))
    huge = write_rows(tmp_path / "huge.jsonl", [("a", 0), ("b", 10**15)])
    assert "reach 1000000000000000" in error_of(huge)  # checked without allocating 10^15 ids
    # in CSV, digits among names are names; in JSONL a mix of numbers and strings is an error
    assert read_text_table(write_rows(tmp_path / "mix.csv", [("a", 1), ("b", "x")])).classes == ("1", "x")
    assert "mix integers (line 1) and strings (line 2)" in error_of(
        write_rows(tmp_path / "mix.jsonl", [("a", 1), ("b", "x")])
    )


def test_each_bad_input_has_a_one_line_message(tmp_path):
    assert ".csv, .tsv, .jsonl or .parquet" in error_of(write_rows(tmp_path / "t.txt", ROWS))
    assert "no such file" in error_of(tmp_path / "absent.csv")
    (tmp_path / "empty.csv").write_bytes(b"")
    (tmp_path / "blank.jsonl").write_text("\n\n")
    assert error_of(tmp_path / "empty.csv").endswith("empty file")
    assert error_of(tmp_path / "blank.jsonl").endswith("empty file")
    assert "no rows" in error_of(write_rows(tmp_path / "header.csv", []))
    missing = error_of(write_rows(tmp_path / "cols.csv", ROWS, columns=("body", "label")))
    assert "no column 'text'; the columns are 'body', 'label'" in missing
    missing = error_of(write_rows(tmp_path / "cols.parquet", ROWS, columns=("text", "y")))
    assert "no column 'label'; the columns are 'text', 'y'" in missing
    assert "line 1: no key 'text'; the keys are 'body', 'label'" in error_of(
        write_rows(tmp_path / "keys.jsonl", ROWS, columns=("body", "label"))
    )
    assert "line 3: empty text in column 'text'" in error_of(write_rows(tmp_path / "e.csv", [("a", 0), (" ", 1)]))
    assert "row 2: empty text" in error_of(write_rows(tmp_path / "e.parquet", [("a", 0), ("", 1)]))
    assert "line 2: empty label" in error_of(write_rows(tmp_path / "l.tsv", [("a", ""), ("b", "x")]))
    one = error_of(write_rows(tmp_path / "one.jsonl", [("a", "pos"), ("b", "pos")]))
    assert "every row has the label 'pos'; a classifier needs at least two classes" in one
    (tmp_path / "ragged.csv").write_text("text,label\na,0\nb,1,extra\n")
    assert "line 3: 3 fields, the header has 2" in error_of(tmp_path / "ragged.csv")
    (tmp_path / "quote.csv").write_text('text,label\n"a,0\nb,1\n')
    assert "line 2: 1 fields, the header has 2 (an unclosed quote joins lines 2–3?)" in error_of(tmp_path / "quote.csv")
    (tmp_path / "quote.tsv").write_text('text\tlabel\n"a\tx\nb"\ty\n')  # TSV: quotes are characters
    assert read_text_table(tmp_path / "quote.tsv").texts == ('"a', 'b"')
    (tmp_path / "bad.jsonl").write_text('{"text": "a", "label": 0}\n{"text": "b", label: 1}\n')
    assert "line 2: not valid JSON" in error_of(tmp_path / "bad.jsonl")
    (tmp_path / "array.jsonl").write_text("[1, 2]\n")
    assert "line 1: expected a JSON object, got an array" in error_of(tmp_path / "array.jsonl")
    (tmp_path / "float.jsonl").write_text('{"text": "a", "label": 0.5}\n')
    assert "label the number 0.5 in column 'label' is neither an integer nor a string" in error_of(
        tmp_path / "float.jsonl"
    )
    latin = tmp_path / "latin.csv"
    latin.write_bytes("text,label\ncaf\u00e9,a\nna\u00efve,b\n".encode("latin-1"))
    message = error_of(latin)
    assert "line 2: bytes b'\\xe9" in message and "set data.encoding" in message and "latin-1" in message
    assert read_text_table(latin, encoding="latin-1").texts == ("caf\u00e9", "na\u00efve")
    (tmp_path / "junk.parquet").write_bytes(b"not parquet at all")
    assert "cannot read Parquet" in error_of(tmp_path / "junk.parquet")


def test_textset_checks_take_and_fingerprint():
    data = TextSet(("a", "b", " a ", "c"), torch.tensor([0, 1, 0, 2]))
    assert data.num_classes == 3 and data.classes == ()
    assert data.take(torch.tensor([True, False, True, False])).texts == ("a", " a ")
    assert data.take(np.array([3, 0])).labels.tolist() == [2, 0]
    assert data.take(slice(1, 3)).texts == ("b", " a ")
    with pytest.raises(DataError, match="3 labels for 4 texts"):
        TextSet(data.texts, torch.tensor([0, 1, 2]))
    with pytest.raises(DataError, match="negative class id -2"):
        TextSet(("a",), torch.tensor([-2]))
    assert TextSet(("a",), torch.tensor([-1])).labels.tolist() == [-1]  # UNLABELLED: data.unlabelled's texts
    # boundaries count: ("ab", "c") and ("a", "bc") differ; so do the labels
    assert text_fingerprint(TextSet(("ab", "c"), torch.tensor([0, 1]))) != text_fingerprint(
        TextSet(("a", "bc"), torch.tensor([0, 1]))
    )
    assert text_fingerprint(data) != text_fingerprint(TextSet(data.texts, torch.tensor([0, 1, 0, 1])))
    assert len(text_fingerprint(data)) == 16


def test_copies_of_a_text_share_one_id():
    data = TextSet(("a", "b", " a\n", "c", "b", "A"), torch.zeros(6, dtype=torch.int64))
    ids = data.ids.tolist()
    assert ids[0] == ids[2] and ids[1] == ids[4] and len(set(ids)) == 4
    assert data.ids.dtype == torch.int64 and data.take(torch.tensor([2, 3])).ids.tolist() == [ids[2], ids[3]]


def test_tweet_sentiment_corpus():
    if not tweet_sentiment_csv().is_file():
        pytest.skip(f"{tweet_sentiment_csv()} is absent: run make system-data")
    tweets = load_tweet_sentiment()
    assert len(tweets) == 38158 and tweets.classes == ("negative", "neutral", "positive")
    assert torch.bincount(tweets.labels).tolist() == [16186, 15018, 6954]
    assert len(torch.unique(tweets.ids)) < len(tweets)  # the corpus repeats some tweets


def test_tweet_sentiment_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setenv("CONGRUENT_TWEET_SENTIMENT_CSV", str(tmp_path / "absent.csv"))
    with pytest.raises(DataError, match="not installed \\(run make system-data\\)"):
        load_tweet_sentiment()


def test_text_batches_carry_no_augmentation_draws_whatever_the_config():
    """Crops and flips are for images: an epoch of text has no draws even where the config asks for
    augmentation (with draws, frozen teachers could not keep a sample's logits: `LogitCache`)."""
    from workers.data import ImageSet
    from workers.training.config import TrainConfig
    from workers.training.epochs import batches

    config = TrainConfig(batch_size=4)
    assert config.augmentation == (2, True)
    texts = TextSet(tuple(f"text {i}" for i in range(10)), torch.zeros(10, dtype=torch.int64))
    assert all(batch.draws is None for batch in batches(texts, config, epoch=1))
    images = ImageSet(torch.zeros(10, 1, 4, 4, dtype=torch.uint8), torch.zeros(10, dtype=torch.int64))
    assert all(batch.draws is not None for batch in batches(images, config, epoch=1))
