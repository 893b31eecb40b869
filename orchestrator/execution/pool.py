"""The teacher pool: Ray actors (workers/teachers/actor.py's `TeacherActor`) that serve teacher logits,
reserved with the student in one placement group, and `TeacherPool`, the logit source the
student's trainer reads them from.

    with serving_pool(plan, {"teacher": replica_checkpoints}, with_student=True) as pool:
        student task: train_job(job, pool.client(("teacher",), topk))
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import ray
import torch
from ray.exceptions import RayActorError
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from orchestrator.execution.cluster import node_capacities
from orchestrator.planning.plan import Plan
from orchestrator.planning.resources import bundle, device, placeable, threads
from pipelines.spec import UpdateSpec
from workers.data import Batch
from workers.teachers import frozen
from workers.teachers.actor import TeacherActor
from workers.teachers.frozen import SampleLogitCache
from workers.training.losses import TopKLogits
from workers.training.teacher_logits import Logits

RESERVATION_POLL_S = 30.0  # how often a pending reservation checks that it still fits the cluster


class ReservationLost(RuntimeError):
    """The pool's reservation no longer fits the cluster's alive nodes (one left while it waited)."""


def _to_torch(value: np.ndarray | tuple[np.ndarray, np.ndarray]) -> Logits:
    if isinstance(value, tuple):
        # Logits is typed as the Tensor it mostly is (workers/teachers/frozen.py); the top-K pool path sends TopKLogits
        return TopKLogits(  # type: ignore[return-value]
            torch.from_numpy(np.array(value[0])), torch.from_numpy(np.array(value[1]))
        )
    return torch.from_numpy(np.array(value))


def _packed(logits: Logits) -> torch.Tensor:
    """One row a sample for the cache: the logits, or top-K values then their class indices (exact
    as float32 below 2²⁴ classes)."""
    if isinstance(logits, TopKLogits):
        return torch.cat([logits.values.float(), logits.indices.float()], dim=1)
    return logits


def _unpacked(rows: torch.Tensor, k: int | None) -> Logits:
    if k is None:
        return rows
    width = rows.shape[1] // 2  # k, or fewer when there are fewer classes
    return TopKLogits(rows[:, :width], rows[:, width:].to(torch.int32))  # type: ignore[return-value]


class TeacherPool:
    """A logit source (workers.training.teacher_logits.LogitSource) over Ray actor handles of `TeacherActor`; groups
    named in `topk` travel as top-K values and indices.

    Batches go to the actors round-robin, each call an ObjectRef that the trainer resolves when it
    reaches that batch; a request is the batch's indices and augmentation draws, which the actors,
    holding the training split (`train_split`), turn into the student's very inputs; on a streamed
    split no actor holds it, and a request is the streamed batch itself (its samples and draws). Unlike
    `ray.util.ActorPool`, which hands an actor new work only after its last result has been
    consumed, this keeps every actor's queue full while the student trains (docs/benchmarks/index.md).

    Faults: an actor that dies is restarted by Ray (`max_restarts`), which also replays its queued
    calls (`max_task_retries`); a call that still fails with the actor's death is sent again, the
    same batch, to the next actor, up to `resubmit_limit` times per batch. Each batch has an id;
    `deliveries()` counts, per id, how often its logits reached the trainer, so a skipped or
    doubled batch is visible.

    Teacher logits computed once: for an unaugmented batch (text; images without augmentation) the
    answers are kept in the student's process, by sample (`SampleLogitCache`: positions in the split
    in memory, ids on a stream; `samples`, the split's length, sizes it), and a batch whose samples
    are all kept is answered from there without asking an actor (`from_cache`); in a batch that mixes
    kept and new samples the kept ones keep their first values."""

    def __init__(
        self,
        actors: Sequence[Any],
        names: Sequence[str],
        train_split: Any,
        topk: Mapping[str, int] | None = None,
        resubmit_limit: int = 4,
        samples: int | None = None,
    ) -> None:
        if not actors:
            raise ValueError("TeacherPool needs at least one actor")
        self.train_split = train_split  # an ObjectRef of the split: requests go by index
        self.request_bytes = 0
        self.names = tuple(names)
        self.topk = dict(topk or {})
        self.actors = list(actors)
        self.resubmit_limit = resubmit_limit
        self._next_actor = 0
        self._requested = 0
        self._delivered: Counter[int] = Counter()
        self.resubmitted = 0
        self.samples = samples
        self.caches: dict[str, SampleLogitCache] = {}  # made in the student's process, on first use
        self.from_cache = 0

    def _submit(self, batch: Batch | Any, topk: Mapping[str, int]) -> Any:
        """Ask the next actor for `batch`: a `Batch` of indices and draws into the split the actors
        hold, or the ObjectRef of a streamed batch, which carries its samples."""
        actor = self.actors[self._next_actor]
        self._next_actor = (self._next_actor + 1) % len(self.actors)
        if isinstance(batch, Batch):
            return actor.logits_by_index.remote(batch, topk, self.names, [self.train_split])
        return actor.logits_of.remote(batch, topk, self.names)

    def _result(self, ref: Any, batch: Batch | Any, topk: Mapping[str, int]) -> dict[str, Any]:
        """The actor's answer for `batch`; re-sent to the next actor when the one asked died."""
        for _ in range(self.resubmit_limit):
            try:
                return ray.get(ref)
            except RayActorError:
                self.resubmitted += 1
                ref = self._submit(batch, topk)
        return ray.get(ref)

    def request(self, inputs: torch.Tensor, batch: Batch | None = None) -> Callable[[], Mapping[str, Logits]]:
        """The logits of a training step, asked by `batch` (indices and augmentation draws, a few
        bytes a sample; a streamed batch, which carries its samples, is put in the object store once
        and sent by reference, also when it is sent again); `inputs` stay with the student."""
        if batch is None:
            raise ValueError("the teacher pool is asked by batch (indices and draws), not by model inputs")
        batch_id = self._requested
        self._requested += 1
        cacheable = self.samples is not None and batch.draws is None and frozen.TEACHER_CACHE
        kept = self._kept(batch) if cacheable else None
        if kept is not None:
            self.from_cache += 1
            self._delivered[batch_id] += 1
            return lambda: kept
        self.request_bytes += batch.nbytes()
        request = batch if batch.values is None else ray.put(batch)
        ref = self._submit(request, self.topk)

        def collect() -> Mapping[str, Logits]:
            result = self._result(ref, request, self.topk)
            self._delivered[batch_id] += 1
            answer = {name: _to_torch(value) for name, value in result.items()}
            if cacheable:
                assert self.samples is not None
                for name, logits in answer.items():
                    self.caches.setdefault(name, SampleLogitCache(self.samples)).store(batch.indices, _packed(logits))
                # a sample's first answer is its answer in every batch: one asked again beside new samples
                # reads its kept row, not the actor's recomputation, which on some CPUs differs in the last
                # bits with the batch it is computed in (the summation order follows the batch's shape)
                answer = self._kept(batch) or answer
            return answer

        return collect

    def _kept(self, batch: Batch) -> dict[str, Logits] | None:
        """Every group's kept answer for the batch's samples; None unless all are kept."""
        found: dict[str, Logits] = {}
        for name in self.names:
            rows = self.caches[name].lookup(batch.indices) if name in self.caches else None
            if rows is None:
                return None
            found[name] = _unpacked(rows, self.topk.get(name))
        return found

    def deliveries(self) -> dict[str, int]:
        """requested, delivered (to the trainer), distinct batch ids delivered, duplicates,
        resubmitted (after an actor died), from_cache (answered in the student's process),
        bytes_per_request (the payload a step sends to an actor)."""
        return {
            "requested": self._requested,
            "delivered": sum(self._delivered.values()),
            "distinct": len(self._delivered),
            "duplicates": sum(n - 1 for n in self._delivered.values()),
            "resubmitted": self.resubmitted,
            "from_cache": self.from_cache,
            "bytes_per_request": self.request_bytes // max(self._requested - self.from_cache, 1),
        }


class PooledTeacher(TeacherActor):
    """The pool's actor: a `TeacherActor` that takes the shared training split from the object store
    on its first request by index (and again after a restart). The reference travels with each such
    request, inside a list, so Ray neither resolves it per call nor pins it as a constructor
    argument; the driver holds it for the pool's lifetime."""

    def logits_by_index(
        self, batch: Batch, topk: Mapping[str, int] | None, names: Sequence[str] | None, shared: list
    ) -> dict:
        if self.split is None:
            self.hold_split(ray.get(shared[0]))
        return self.logits_of(batch, topk, names)


@dataclass
class PoolHandle:
    """The running pool: its actors and the placement group that holds them (and the student's
    bundle, index 0, when reserved with one)."""

    actors: list
    group: PlacementGroup
    with_student: bool
    train_split: Any  # ObjectRef of the training split the actors read: requests go by index
    samples: int  # the training split's length

    def student_strategy(self) -> PlacementGroupSchedulingStrategy:
        """Where the student task goes: the placement group's bundle 0."""
        return PlacementGroupSchedulingStrategy(self.group, placement_group_bundle_index=0)

    def client(self, names: Sequence[str], topk: Mapping[str, int] | None = None) -> TeacherPool:
        return TeacherPool(self.actors, names, self.train_split, topk, samples=self.samples)

    def batches_served(self) -> tuple[list[int], int]:
        """(actor pids, batches served in all since each actor's last start)."""
        infos = ray.get([actor.info.remote() for actor in self.actors])
        return [i["pid"] for i in infos], sum(i["batches_served"] for i in infos)


def _wait_for(group: PlacementGroup, bundles: list[dict[str, float]]) -> None:
    """Until the cluster holds the reservation: a busy cluster (other pipelines) makes it wait in
    Ray's queue as long as it takes; ReservationLost once it no longer fits the alive nodes
    (preflight checked that it fits the whole cluster)."""
    while not ray.wait([group.ready()], timeout=RESERVATION_POLL_S)[0]:
        nodes = node_capacities()
        if not placeable(nodes, [], [(b.get("CPU", 0.0), b.get("GPU", 0.0)) for b in bundles]):
            raise ReservationLost(
                f"resources: {bundles} no longer fit the cluster's alive nodes {nodes} (CPU, GPU): a node left"
            )


@contextlib.contextmanager
def teacher_pool(
    spec: UpdateSpec,
    groups: Mapping[str, Sequence[str]],
    with_student: bool,
    train_split: Any,
    samples: int,
    spread: bool = False,
) -> Iterator[PoolHandle]:
    """`resources.teacher_actors` actors holding `groups` of checkpoints, reserved in one placement
    group with the student (bundle 0, when `with_student`) so that all start at once or none, and
    actors never take the CPUs the student needs. With `train_split` (an ObjectRef of the uint8
    training split, `ray.put` once: shared memory on a node) each actor holds the split and the
    student's requests carry only indices and augmentation draws; without one (`train_split`
    None: a streamed split), the requests carry the streamed batches. `samples`: the training split's length. The
    actors are killed and the reservation released on the way out, also on an error or Ctrl-C.
    With `spread` the actors are placed across nodes (SPREAD): the headroom left on each node is
    even, so that a data-parallel student's workers, which Ray Train reserves separately, fit
    beside them."""
    r = spec.resources
    bundles = ([bundle(r.student)] if with_student else []) + [bundle(r.teacher)] * r.teacher_actors
    strategy = "PACK"
    if spread:  # one actor per node where there are enough nodes: SPREAD alone is best effort
        strategy = "STRICT_SPREAD" if len(bundles) <= len([n for n in ray.nodes() if n["Alive"]]) else "SPREAD"
    group = placement_group(bundles, strategy=strategy, name=f"distil-{spec.spec_hash}")
    actors: list = []
    try:
        _wait_for(group, bundles)
        actor_class = ray.remote(PooledTeacher)
        first = int(with_student)
        actors = [
            actor_class.options(
                num_cpus=r.teacher.cpus,
                num_gpus=r.teacher.gpus,
                max_restarts=2,
                max_task_retries=2,
                scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=first + i),
            ).remote(
                dict(groups),
                threads(r.teacher.cpus),
                device(r.teacher.gpus),
                spec.allow_user_factories,
                precision=spec.train.precision,
                streamed=train_split is None,
            )
            for i in range(r.teacher_actors)
        ]
        yield PoolHandle(actors, group, with_student, train_split, samples)
    finally:
        for actor in actors:
            ray.kill(actor)
        remove_placement_group(group)


@contextlib.contextmanager
def serving_pool(
    plan: Plan, groups: Mapping[str, Sequence[str]], with_student: bool, spread: bool = False
) -> Iterator[PoolHandle | None]:
    """The teacher pool serving `groups`, its actors holding the training split (put in the object
    store once) so that requests go by index, or, on a streamed split, which nothing holds, taking
    each streamed batch; None when there is nothing to serve or the teachers run in the student's
    own process (`teacher_actors: 0`). The one pool of `run` and `tune`."""
    if not groups or plan.teachers_in_process:
        yield None
        return
    train = plan.splits.train_split
    assert train is not None, "serving_pool runs in the driver, which holds the plan's training split"
    held = train.shareable()  # uint8 images as one array (shared memory on a node), or the texts
    train_split = None if held is None else ray.put(held)
    with teacher_pool(plan.spec, groups, with_student, train_split, len(train), spread) as pool:
        yield pool
