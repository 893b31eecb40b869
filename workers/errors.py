"""One-line error messages (imports nothing but the standard library)."""

from __future__ import annotations


def first_line(error: BaseException | str) -> str:
    """The first non-empty line of an exception's message (or of a text), whole; the exception
    type's name when the message is empty."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    if lines:
        return lines[0]
    return type(error).__name__ if isinstance(error, BaseException) else ""
