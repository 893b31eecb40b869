"""The table formats by file suffix: the one place a table's reader is chosen (`table_format`). Every
reader module — delimited.py, jsonl.py, parquet.py — is a `TableReader`: the same functions, with the
same signatures, and three facts about its format."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from workers.data.formats import delimited, jsonl, parquet
from workers.data.formats.rows import Opener, Row


class TableReader(Protocol):
    """What each table format's module offers (mypy checks the modules against it)."""

    TYPED: bool  # values as stored (else every value a string, and a label column of digit strings holds ids)
    ENCODED: bool  # the file is text in data.encoding (else always UTF-8)
    NO_ROWS: str  # what an empty file's refusal says it holds

    def columns(self, open_source: Opener, suffix: str, encoding: str) -> tuple[list[str], bool]:
        """The column names (from a footer, header or first records) and whether a row follows."""
        ...

    def batches(self, open_source: Opener, suffix: str, encoding: str, columns: list[str]) -> Iterator[Any]:
        """The columns as pyarrow record batches, read in turn: what a streamed reading task reads."""
        ...

    def column(self, path: Any, suffix: str, encoding: str, name: str) -> tuple[list[Any] | None, list[str]]:
        """Every value of one column of a local file (None: no such column), and its columns."""
        ...

    def rows(
        self,
        path: object,
        raw: bytes,
        suffix: str,
        encoding: str,
        text_column: str,
        label_column: str,
        problems: list[str],
    ) -> tuple[list[Row], str | None]:
        """The text and label column of a file's bytes read whole, each row placed where a refusal
        names it (a missing column one of `problems`), and the reader's refusal where the rows were
        read another way to say what breaks (else None)."""
        ...


READERS: dict[str, TableReader] = {
    **dict.fromkeys(delimited.SUFFIXES, delimited),
    **dict.fromkeys(jsonl.SUFFIXES, jsonl),
    **dict.fromkeys(parquet.SUFFIXES, parquet),
}


def table_format(suffix: str) -> TableReader:
    """The reader module of a table file with `suffix` (.csv, .tsv, .jsonl, .parquet)."""
    return READERS[suffix]
