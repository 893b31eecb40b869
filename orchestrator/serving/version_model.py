"""`VersionModel`, one registered version as a Ray Serve deployment in an application of its own
(deployments.py says how the gateway uses it): loaded from the registry with its own tokenizer or
input description, requests batched across clients (`@serve.batch`)."""

import asyncio
from typing import Any

from ray import serve

from orchestrator.serving import credentials
from orchestrator.serving.credentials import Sealed
from orchestrator.serving.requests import RequestError
from orchestrator.serving.settings import ServeSettings


@serve.deployment(max_ongoing_requests=64)
class VersionModel:
    """One registered version (`name`/`version`) answering batches of raw samples."""

    def __init__(
        self, name: str, version: str, settings: ServeSettings, device: str = "cpu", sealed: Sealed | None = None
    ) -> None:
        import torch

        from orchestrator.serving.predictor import Predictor
        from orchestrator.tracking import registry, store
        from orchestrator.tracking.version_refs import VersionRef

        torch.set_num_threads(settings.threads)
        credentials.load_into_replica(sealed)  # the storage credentials, before anything is read (credentials.py)
        store.configure()
        self.version = version
        self.predictor = Predictor(registry.checkpoint_of(VersionRef(name, version)), device)
        self.answer.set_max_batch_size(settings.max_batch_size)  # type: ignore[attr-defined]  # serve.batch's wrapper
        self.answer.set_batch_wait_timeout_s(settings.batch_wait_s)  # type: ignore[attr-defined]

    def describe(self) -> dict[str, Any]:
        """What the gateway checks requests against."""
        return {
            "version": self.version,
            "modality": self.predictor.modality,
            "num_classes": self.predictor.settings.num_classes,
            "class_names": self.predictor.class_names,
        }

    @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.005)
    async def answer(self, requests: list[list[str | bytes]]) -> list[Any]:
        """Each request's (version, answers), the answers as (class id, probability) pairs, all requests
        in one forward; a request whose input cannot be read gets its RequestError (the others are
        answered). The version travels with the answers: during a champion swap (driver/serve.py) a
        deployment's replicas serve two versions for a moment, and the gateway says which answered."""
        flat = [payload for request in requests for payload in request]
        try:
            answers = await asyncio.to_thread(self.predictor.answer, flat)
        except RequestError:
            return [await asyncio.to_thread(self._alone, request) for request in requests]
        out, start = [], 0
        for request in requests:
            out.append((self.version, [(a.class_id, a.probability) for a in answers[start : start + len(request)]]))
            start += len(request)
        return out

    def _alone(self, request: list[str | bytes]) -> Any:
        try:
            return (self.version, [(a.class_id, a.probability) for a in self.predictor.answer(request)])
        except RequestError as e:
            return e
