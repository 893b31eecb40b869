"""An epoch's shuffle buffer in the process that consumes a stream: rows come from Ray Data in large
chunks (its per-batch overhead paid once a chunk, not at every training batch) and leave as training
batches in an order drawn by a seeded generator (orchestrator/dataplane/table_streams.py uses it)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np


def shuffled_batches(
    chunks: Iterator[dict[str, np.ndarray]], batch_size: int, buffer_rows: int, generator: np.random.Generator
) -> Iterator[dict[str, np.ndarray]]:
    """Batches of `batch_size` rows (the last one shorter) of `chunks` (dicts of equal-length numpy
    columns) through a shuffle buffer: once it holds `buffer_rows` and a batch more, it is permuted
    by `generator` and all but half a buffer leave it as batches; the rest mixes with what comes."""
    pool: list[dict[str, np.ndarray]] = []
    held = 0
    for chunk in chunks:
        pool.append(chunk)
        held += len(chunk["id"])
        if held < buffer_rows + batch_size:
            continue
        rows = {name: np.concatenate([part[name] for part in pool]) for name in pool[0]}
        order = generator.permutation(held)
        leaving = (held - buffer_rows // 2) // batch_size * batch_size
        for start in range(0, leaving, batch_size):
            yield {name: column[order[start : start + batch_size]] for name, column in rows.items()}
        pool = [{name: column[order[leaving:]] for name, column in rows.items()}]
        held -= leaving
    if held:
        rows = {name: np.concatenate([part[name] for part in pool]) for name in pool[0]}
        order = generator.permutation(held)
        for start in range(0, held, batch_size):
            yield {name: column[order[start : start + batch_size]] for name, column in rows.items()}
