"""What the table formats' readers share: a row as the in-memory reader places it, what a reader opens,
a column's values, and JSON's names for a value's type (what a refusal says a value is)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# A row as read: (where it is, e.g. "line 7" or "row 3"; the text value; the label value), MISSING
# for the value of a column the table does not have.
Row = tuple[str, object, object]
MISSING = object()
# What a reader reads: a path, a pyarrow file or a buffer. A file may be read twice (its header,
# then its rows), so the readers take a function that opens it afresh.
Opener = Callable[[], Any]


def values(table: Any, column: str) -> list[Any]:
    """A pyarrow table's or batch's column as Python objects (str, int, float, bool, None…)."""
    return table.column(column).to_pylist()


def listed(names: list[str]) -> str:
    """Column names as a refusal lists them."""
    return ", ".join(repr(n) for n in names) if names else "none"


def json_type(value: object) -> str:
    """What JSON calls a value's type, as a refusal names it ("a boolean", "the number 3", "null")."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    names: dict[type, str] = {dict: "an object", list: "an array", str: "a string"}
    return names.get(type(value), type(value).__name__)
