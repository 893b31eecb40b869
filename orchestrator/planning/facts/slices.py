"""`data.slice_columns` and `data.slices`: every slice column is a column of each of the table's
shards, and the slices file reads (an `id` column of sample keys, none blank or repeated, and a
slice column beside it) — checked before training, so a ledger is never written without them."""

from __future__ import annotations

import numpy as np

from orchestrator.dataplane.table_streams import listed_shards, shard_columns
from orchestrator.planning.facts.kinds import Data, Found, Problems, Slices
from workers.data.slice_table import read_slice_table
from workers.errors import DataError, problems_of


def check(found: Found) -> Slices | Problems | None:
    data = found.settled.data
    gate = found.settled.promote
    if not data.slice_columns and data.slices is None:
        if gate is not None and gate.max_slice_nfr is not None:
            return Problems.of("promote.max_slice_nfr", ["the spec names no slices (data.slice_columns, data.slices)"])
        return None
    problems: list[str] = []
    columns: list[str] = []
    if data.slice_columns and data.path is not None:
        try:
            files, suffix, listed = listed_shards(data.path)
            shard_columns(files, suffix, data.encoding, listed, data.slice_columns)
            columns += data.slice_columns
        except DataError as e:
            problems += [f"data.slice_columns: {line}" for line in problems_of(e)]
    if data.slices is not None:
        try:
            ids, named = read_slice_table(data.slices)
            columns += [c for c in named if c not in columns]
        except DataError as e:
            problems += [f"data.slices: {line}" for line in problems_of(e)]
        else:
            loaded = found.get(Data)
            held = loaded.splits.eval.ids if loaded is not None else None  # a stream's too: its scan named them
            if held is not None and len(held) and not np.isin(held.numpy(), ids).any():
                problems.append(
                    f"data.slices: {data.slices} names none of the {len(held):,} eval samples by id (sample keys: "
                    "the id column's value, a text, an image's path under its folder)"
                )
    return Problems(tuple(problems)) if problems else Slices(tuple(columns))
