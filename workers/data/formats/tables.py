"""The table formats by file suffix: the one place a table's reader is chosen. Each reader module
offers `batches(open_source, suffix, encoding, columns)` (a file's columns as pyarrow record batches,
what a streamed reading task reads) and `column(path, suffix, encoding, name)` (one column of a local
file, and its column names); the in-memory `rows` of each, and a stream's scan of its header, are
the format's own (each words its refusals)."""

from __future__ import annotations

from types import ModuleType

from workers.data.formats import delimited, jsonl, parquet

READERS: dict[str, ModuleType] = {
    **dict.fromkeys(delimited.SUFFIXES, delimited),
    **dict.fromkeys(jsonl.SUFFIXES, jsonl),
    **dict.fromkeys(parquet.SUFFIXES, parquet),
}


def table_format(suffix: str) -> ModuleType:
    """The reader module of a table file with `suffix` (.csv, .tsv, .jsonl, .parquet)."""
    return READERS[suffix]
