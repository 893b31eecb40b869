"""A registered version answering a request's raw inputs (workers/models/raw_inputs.py), a sample it
cannot read a RequestError (HTTP 400) of the request."""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.serving.requests import RequestError
from workers.errors import DataError
from workers.models.raw_inputs import Answer, RawInputModel

__all__ = ["Answer", "Predictor"]


class Predictor(RawInputModel):
    """`RawInputModel` whose unreadable sample is the request's error."""

    def answer(self, payloads: Sequence[str | bytes]) -> list[Answer]:
        try:
            return super().answer(payloads)
        except DataError as e:
            raise RequestError(str(e)) from None
