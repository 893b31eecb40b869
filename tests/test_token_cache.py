"""Token ids kept after a streamed text split's first epoch (orchestrator/dataplane/token_cache.py):
the later epochs' rows, their order, and a file that cannot be written. No Ray: the cache sees the
rows the reading tasks make."""

import logging

import numpy as np
import pyarrow as pa

from orchestrator.dataplane import token_cache
from orchestrator.dataplane.token_cache import TokenCache, padded, ragged


def _rows(start: int, n: int, width: int = 6) -> dict[str, np.ndarray]:
    """n rows as the reading tasks make them: ids start.., token ids right-padded to `width`."""
    ids = np.arange(start, start + n, dtype=np.int64)
    lengths = (ids % width + 1).astype(np.int64)
    values = np.zeros((n, width), dtype=np.int32)
    for i, length in enumerate(lengths):
        values[i, :length] = np.arange(1, length + 1) + 100 * ids[i]
    return {
        "id": ids,
        "values": values,
        "length": lengths,
        "label": ids % 3,
        "text": np.array([f"text {i}" for i in ids], dtype=object),
    }


def test_ragged_and_padded_token_ids_match_hand_values():
    values = np.array([[5, 6, 0], [7, 0, 0], [8, 9, 4]], dtype=np.int32)
    lists = ragged(values, np.array([2, 1, 3]))
    assert lists.to_pylist() == [[5, 6], [7], [8, 9, 4]]
    assert padded(lists, np.array([2, 1, 3])).tolist() == values.tolist()
    two = pa.array([[1], [2, 3]], pa.list_(pa.int32()))
    assert padded(two, np.array([1, 2])).tolist() == [[1, 0], [2, 3]], "padded to the longest, not the first width"


def _kept(monkeypatch, sizes: list[int]) -> tuple[TokenCache, dict[str, np.ndarray]]:
    monkeypatch.setattr(token_cache, "CACHE_BLOCK", 100)
    monkeypatch.setattr(token_cache, "WINDOW_ROWS", 200)
    cache, start, parts = TokenCache(("seed", "digest", 64)), 0, []
    for n in sizes:  # the stream's batches (the last one shorter)
        parts.append(_rows(start, n))
        cache.add(parts[-1])
        start += n
    assert cache.finish() and cache.complete
    return cache, {name: np.concatenate([p[name] for p in parts]) for name in ("id", "length", "label")}


def test_the_first_epoch_is_read_back_as_it_passed(monkeypatch):
    cache, whole = _kept(monkeypatch, [64] * 9 + [29])
    assert cache.reader.num_record_batches == 7, "605 rows kept in blocks of 100"
    again = list(cache.batches(64, None))
    assert [len(b["id"]) for b in again] == [64] * 9 + [29]
    assert np.array_equal(np.concatenate([b["id"] for b in again]), whole["id"])
    for batch in again:
        expected = _rows(int(batch["id"][0]), len(batch["id"]))
        assert np.array_equal(batch["label"], expected["label"]) and list(batch["text"]) == list(expected["text"])
        width = int(batch["length"].max())
        assert np.array_equal(batch["values"], expected["values"][:, :width]), "token ids cut to the longest"


def test_a_later_epoch_reads_every_kept_row_once_in_an_order_seeded_by_it(monkeypatch):
    cache, whole = _kept(monkeypatch, [64] * 9 + [29])
    one = list(cache.batches(64, 7))
    ids = np.concatenate([b["id"] for b in one])
    assert sorted(ids.tolist()) == whole["id"].tolist(), "every row once"
    assert [len(b["id"]) for b in one] == [64] * 9 + [29], "full batches, then the rest"
    assert np.array_equal(ids, np.concatenate([b["id"] for b in cache.batches(64, 7)])), "the same order again"
    other = np.concatenate([b["id"] for b in cache.batches(64, 8)])
    assert not np.array_equal(ids, other) and not np.array_equal(ids, whole["id"])
    for batch in one:  # each row keeps its own label and tokens
        assert np.array_equal(batch["label"], batch["id"] % 3)
        assert np.array_equal(batch["values"][:, 0], 100 * batch["id"] + 1)
    assert not any(np.all(np.diff(b["id"]) == 1) for b in one), "rows are shuffled"
    first_window = set(np.concatenate([b["id"] for b in one[:3]]).tolist())
    assert len({i // 100 for i in first_window}) == 7, "the first window draws from every block of the file"


def test_a_file_that_cannot_be_written_is_dropped_with_one_warning(monkeypatch, caplog):
    class FullDisk:
        def write_batch(self, batch):
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(token_cache, "CACHE_BLOCK", 100)
    cache = TokenCache(("seed", "digest", 64))
    cache.writer = FullDisk()
    with caplog.at_level(logging.WARNING, logger=token_cache.__name__):
        for start in range(0, 300, 64):
            cache.add(_rows(start, 64))
        assert not cache.finish()
    assert cache.dropped and not cache.complete and cache.file is None
    assert [r.getMessage() for r in caplog.records] == [
        "cannot keep the first epoch's token ids on disk ([Errno 28] No space left on device); "
        "later epochs read the stream"
    ]


def test_the_token_cache_benchmark_reports_its_figures_and_a_failed_run():
    from benchmarks.streaming.token_cache_cap import in_memory_bytes, report

    assert in_memory_bytes(10, 600) == 10 * 128 * 4 + 10 * 57 + 600
    results = {
        "date": "2026-11-28",
        "rows": 1000,
        "limit_bytes": 512 << 20,
        "returncode": 0,
        "peak_bytes": 512 << 20,
        "peak_resident_bytes": 100 << 20,
        "limit_hits": 1234,
        "oom_kills": 0,
        "file_bytes": 1024 << 20,
        "in_memory_bytes": 2048 << 20,
        "written_rows_per_second": 700000.0,
        "read_rows_per_second": [270000.0, 250000.0],
    }
    text = report(results)
    assert "| 1,000 | 1,024 | 2,048 | 512 | 512 | 100 | 0 | 700,000 | 270,000 / 250,000 |" in text
    assert "The kept file is 2.0× the limit" in text and "reached its limit 1,234 times" in text
    failed = report({**results, "returncode": -9, "oom_kills": 1})
    assert "the child process failed (exit -9, OOM kills 1)" in failed
