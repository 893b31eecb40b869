"""One-line error messages (imports nothing but the standard library)."""

from __future__ import annotations


def first_line(error: BaseException | str) -> str:
    """The first non-empty line of an exception's message (or of a text), whole; the exception
    type's name when the message is empty."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    if lines:
        return lines[0]
    return type(error).__name__ if isinstance(error, BaseException) else ""


class Problems(ValueError):
    """An error that names every problem found at once, one line each (`problems`); its message
    joins them with "; ". A check that can go on after a problem collects them and raises once."""

    def __init__(self, *problems: str) -> None:
        self.problems = [problem for problem in problems if problem] or ["unknown problem"]
        super().__init__("; ".join(self.problems))

    def __reduce__(self) -> tuple[type, tuple[str, ...]]:  # travels back from Ray workers with its lines
        return type(self), tuple(self.problems)


class DataError(Problems):
    """A dataset that cannot be used; each problem names the path and what is wrong."""


def problems_of(error: BaseException) -> list[str]:
    """The lines of a `Problems` error, else the error's first line."""
    return list(getattr(error, "problems", None) or [first_line(error)])
