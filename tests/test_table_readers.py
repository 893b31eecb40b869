"""One reader per table format (workers/data/tables.py): the in-memory `read_text_table` and the
streamed data plane's readers (table_readers.shard_batches + scan_rows, what Ray Data's tasks and
open_table_stream's scan run, driven here without Ray) give the same texts and labels."""

import pytest

from orchestrator.dataplane.table_streams import table_shards
from orchestrator.dataplane.table_tasks import scan_rows, shard_batches
from workers.data.text_tables import read_text_table
from workers.errors import DataError

# a quoted delimiter, a quoted line break, doubled quotes, digits that type inference would change
ROWS = [("good, film", "007"), ('a "b"\nc', "1.0"), ("007", "pos"), (" fine ", "neg"), ("great", "pos")]


def write(path, rows):
    if path.suffix == ".parquet":
        import pyarrow as pa  # type: ignore[import-untyped]
        import pyarrow.parquet as pq  # type: ignore[import-untyped]

        pq.write_table(pa.table({"text": [t for t, _ in rows], "label": [lab for _, lab in rows]}), path)
    elif path.suffix == ".jsonl":
        import json

        path.write_text("".join(json.dumps({"text": t, "label": lab}) + "\n" for t, lab in rows), encoding="utf-8")
    else:
        quoted = ['"' + v.replace('"', '""') + '"' for row in rows for v in row]
        lines = ["text,label"] + [f"{quoted[i]},{quoted[i + 1]}" for i in range(0, len(quoted), 2)]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def streamed(path, encoding="utf-8"):
    shards = table_shards(str(path), "text", "label", encoding)
    texts, labels = [], []
    for file in shards.files:
        for batch in shard_batches(shards, file):
            batch_texts, batch_labels, _ = scan_rows(batch, shards, file)
            texts += batch_texts
            labels += batch_labels
    return texts, labels


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_in_memory_and_streamed_readers_read_the_same_rows(tmp_path, suffix):
    path = write(tmp_path / f"t{suffix}", ROWS)
    memory = read_text_table(path)
    texts, labels = streamed(path)
    assert list(memory.texts) == texts == [t for t, _ in ROWS]
    assert [memory.classes[i] for i in memory.labels.tolist()] == labels
    assert labels == [lab.strip() for _, lab in ROWS]  # "007" and "1.0" as written, not 7 and 1


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".jsonl", ".parquet"])
def test_integer_labels_read_the_same_both_ways(tmp_path, suffix):
    rows = [(f"text {i}", i % 3) for i in range(7)]
    if suffix in (".csv", ".tsv"):
        sep = "\t" if suffix == ".tsv" else ","
        path = tmp_path / f"ids{suffix}"
        path.write_text("\n".join([f"text{sep}label"] + [f"{t}{sep}{lab}" for t, lab in rows]) + "\n")
    else:
        path = write(tmp_path / f"ids{suffix}", rows)
    memory = read_text_table(path)
    texts, labels = streamed(path)
    assert list(memory.texts) == texts and memory.labels.tolist() == [int(lab) for lab in labels] == [
        1 * (i % 3) for i in range(7)
    ]


def test_a_tsv_has_no_quoting_and_a_latin1_csv_reads_both_ways(tmp_path):
    tsv = tmp_path / "q.tsv"
    tsv.write_text('text\tlabel\n"a\tx\nb"\ty\n')
    assert read_text_table(tsv).texts == ('"a', 'b"') and streamed(tsv)[0] == ['"a', 'b"']
    latin = tmp_path / "latin.csv"
    latin.write_bytes("text,label\ncaf\u00e9,a\nna\u00efve,b\n".encode("latin-1"))
    assert (
        list(read_text_table(latin, encoding="latin-1").texts)
        == streamed(latin, "latin-1")[0]
        == ["caf\u00e9", "na\u00efve"]
    )


def test_the_streamed_reader_names_a_missing_column_and_an_empty_shard(tmp_path):
    (tmp_path / "cols.csv").write_text('"body, quoted",label\na,0\n')
    with pytest.raises(DataError, match=r"cols.csv: no column 'text'; the columns are 'body, quoted', 'label'"):
        table_shards(str(tmp_path / "cols.csv"), "text", "label")
    (tmp_path / "head.csv").write_text("text,label\n\n")
    with pytest.raises(DataError, match=r"head.csv: empty shard \(a header and no rows\)"):
        table_shards(str(tmp_path / "head.csv"), "text", "label")
    (tmp_path / "blank.jsonl").write_text("\n\n")
    with pytest.raises(DataError, match=r"blank.jsonl: empty shard \(no rows\)"):
        table_shards(str(tmp_path / "blank.jsonl"), "text", "label")
