"""The teacher pool: Ray actors that hold frozen models and serve reference logits for a batch.

Each `TeacherActor` loads every group of checkpoints it is given — e.g. {"teacher": the m replicas,
"old": the deployed model} — and answers `logits(batch)` with each group's mean logits (or, for a
group served as top-K, only the K largest values and their class indices). `TeacherPool` spreads
batches over the actors and is a reference source for the trainer: it submits a batch when the
trainer requests it (ahead of the step), and the trainer collects it when it reaches that step.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch

from workers import storage
from workers.checkpoints import load_model
from workers.data import ImageSet, to_model_input
from workers.inference import FrozenModels, Logits
from workers.losses import TopKLogits


def fetch_checkpoint(uri: str) -> str:
    """A local path for a checkpoint URI (downloaded from S3 into a temp dir when needed)."""
    if not storage.is_s3(uri):
        return uri
    local = os.path.join(tempfile.gettempdir(), "congruent-cache", uri.removeprefix("s3://"))
    if not os.path.exists(local) and not storage.download(uri, local):
        raise FileNotFoundError(f"{uri}: no such checkpoint")
    return local


class TeacherActor:
    """Holds groups of frozen models (eval mode, no gradients) and serves their mean logits."""

    def __init__(
        self, groups: Mapping[str, Sequence[str]], threads: int = 1, device: str = "cpu",
        allow_user_factories: bool = False, niceness: int = 0,
    ) -> None:
        torch.set_num_threads(threads)
        if niceness:
            os.nice(niceness)
        self.groups = {
            name: FrozenModels([load_model(fetch_checkpoint(uri), allow_user_factories)[0] for uri in uris], device)
            for name, uris in groups.items()
        }
        self.batches_served = 0
        self.busy_seconds = 0.0

    def logits(
        self, inputs: np.ndarray, topk: Mapping[str, int] | None = None, names: Sequence[str] | None = None
    ) -> dict[str, np.ndarray | tuple[np.ndarray, np.ndarray]]:
        """{group: B×C mean logits} or, for groups in `topk`, (B×K values, B×K int32 class indices);
        only the groups in `names` when given."""
        topk = topk or {}
        started = time.perf_counter()
        x = torch.from_numpy(np.array(inputs))  # object-store arrays are read-only: copy
        out: dict[str, np.ndarray | tuple[np.ndarray, np.ndarray]] = {}
        for name, models in self.groups.items():
            if names is not None and name not in names:
                continue
            logits = models(x).cpu()
            if name in topk:
                top = TopKLogits.of(logits, topk[name])
                out[name] = (top.values.numpy(), top.indices.numpy())
            else:
                out[name] = logits.numpy()
        self.batches_served += 1
        self.busy_seconds += time.perf_counter() - started
        return out

    def info(self) -> dict[str, float]:
        return {"pid": os.getpid(), "batches_served": self.batches_served, "busy_seconds": self.busy_seconds}


def _to_torch(value: np.ndarray | tuple[np.ndarray, np.ndarray]) -> Logits:
    if isinstance(value, tuple):
        return TopKLogits(torch.from_numpy(np.array(value[0])), torch.from_numpy(np.array(value[1])))
    return torch.from_numpy(np.array(value))


class TeacherPool:
    """A reference source over Ray actor handles of `TeacherActor` (see module docstring); groups
    named in `topk` travel as top-K values and indices.

    Batches go to the actors round-robin, each call an ObjectRef that the trainer resolves when it
    reaches that batch. Unlike `ray.util.ActorPool`, which hands an actor new work only after its
    last result has been consumed, this keeps every actor's queue full while the student trains:
    on 2 cores ActorPool left the actors idle long enough to cost a fifth of the throughput.

    Faults: an actor that dies is restarted by Ray (`max_restarts`), which also replays its queued
    calls (`max_task_retries`); a call that still fails with the actor's death is sent again, the
    same batch, to the next actor, up to `resubmit_limit` times per batch. Each batch has an id;
    `deliveries()` counts, per id, how often its logits reached the trainer, so a skipped or
    doubled batch is visible."""

    def __init__(
        self, actors: Sequence, names: Sequence[str], topk: Mapping[str, int] | None = None, resubmit_limit: int = 4
    ) -> None:
        if not actors:
            raise ValueError("TeacherPool needs at least one actor")
        self.names = tuple(names)
        self.topk = dict(topk or {})
        self.actors = list(actors)
        self.resubmit_limit = resubmit_limit
        self._next_actor = 0
        self._requested = 0
        self._delivered: Counter[int] = Counter()
        self.resubmitted = 0

    def _submit(self, batch: np.ndarray, topk: Mapping[str, int]):
        actor = self.actors[self._next_actor]
        self._next_actor = (self._next_actor + 1) % len(self.actors)
        return actor.logits.remote(batch, topk, self.names)

    def _result(self, ref, batch: np.ndarray, topk: Mapping[str, int]) -> dict:
        """The actor's answer for `batch`; re-sent to the next actor when the one asked died."""
        import ray
        from ray.exceptions import RayActorError

        for _ in range(self.resubmit_limit):
            try:
                return ray.get(ref)
            except RayActorError:
                self.resubmitted += 1
                ref = self._submit(batch, topk)
        return ray.get(ref)

    def request(self, inputs: torch.Tensor) -> Callable[[], Mapping[str, Logits]]:
        batch_id, batch = self._requested, inputs.numpy()
        self._requested += 1
        ref = self._submit(batch, self.topk)

        def collect() -> Mapping[str, Logits]:
            result = self._result(ref, batch, self.topk)
            self._delivered[batch_id] += 1
            return {name: _to_torch(value) for name, value in result.items()}

        return collect

    def deliveries(self) -> dict[str, int]:
        """requested, delivered (to the trainer), distinct batch ids delivered, duplicates,
        resubmitted (after an actor died)."""
        return {
            "requested": self._requested, "delivered": sum(self._delivered.values()),
            "distinct": len(self._delivered), "duplicates": sum(n - 1 for n in self._delivered.values()),
            "resubmitted": self.resubmitted,
        }

    def predict(self, data: ImageSet, name: str, batch_size: int = 1024) -> torch.Tensor:
        """N×C mean logits of group `name` over `data`, in order (e.g. the paragon on the eval split)."""
        batches = [to_model_input(data.images[i : i + batch_size]).numpy() for i in range(0, len(data), batch_size)]
        refs = [self._submit(batch, {}) for batch in batches]
        results = [self._result(ref, batch, {}) for ref, batch in zip(refs, batches)]
        return torch.cat([torch.from_numpy(np.array(result[name])) for result in results])
