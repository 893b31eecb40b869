"""Frozen models as reference sources: `FrozenModels` (the mean logits of one or more models, in eval
mode), `LocalTeachers` (the in-process source: no hop at all, the fast path when the teachers share
the student's device), `LogitCache` and `SampleLogitCache` (each sample's logits computed once, for
deterministic inputs: by position in a split held in memory, by id in a streamed one, in a file)."""

from __future__ import annotations

import copy
import tempfile
import warnings
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, stack_module_state, vmap

from workers.data import Batch
from workers.data.encoded import EncodedSplit
from workers.data.split_port import BatchReader
from workers.errors import first_line
from workers.models.predict import placed
from workers.runtime import autocast
from workers.teachers.shared_base import SharedBaseTeachers, shares_one_base
from workers.training.teacher_logits import Logits

TEACHER_CACHE = True  # frozen teachers of unaugmented inputs answer each sample once (benchmarks: off)


class LogitCache:
    """Each training sample's logits, kept the first time they are computed: frozen teachers of
    deterministic inputs (text; images without augmentation) answer every later epoch from memory
    instead of running again (docs/benchmarks/performance.md, "Teacher logits computed once")."""

    def __init__(self, samples: int) -> None:
        self.known = torch.zeros(samples, dtype=torch.bool)
        self.values: torch.Tensor | None = None
        self.computed = 0  # batches computed, not served from the cache

    def get(self, indices: torch.Tensor, compute: Callable[[], torch.Tensor]) -> torch.Tensor:
        index = indices.long().cpu()
        if self.values is not None and bool(self.known[index].all()):
            return self.values[index.to(self.values.device)]
        logits = compute()
        if self.values is None:
            self.values = torch.zeros(len(self.known), logits.shape[1], dtype=logits.dtype, device=logits.device)
        self.values[index.to(logits.device)] = logits
        self.known[index] = True
        self.computed += 1
        return logits


class SampleLogitCache:
    """Each sample's logits kept by its stable id (a streamed batch's `indices`) the first time they
    are computed, in a memory-mapped temporary file that the page cache holds and the kernel may
    write out: the teacher-logit cache of a streamed split, which no process holds and whose ids are
    hashes, not positions. Epoch 1 computes every sample once; every later batch is read from the
    file. Ids are looked up in a sorted array (8 + 8 bytes a sample) and the ids added since its last
    merge (at most MERGE_EVERY, in a dict)."""

    MERGE_EVERY = 1 << 16

    def __init__(self, samples: int) -> None:
        self.capacity = samples  # distinct ids: a streamed split's samples (duplicates share an id)
        self.ids = np.empty(0, np.int64)  # sorted
        self.rows = np.empty(0, np.int64)  # rows[i]: the file's row of ids[i]
        self.recent: dict[int, int] = {}  # id → row, not yet merged into `ids`
        self.values: np.ndarray | None = None
        self.device: torch.device | None = None
        self.used = 0
        self.computed = 0  # batches computed, not served from the cache

    def rows_of(self, ids: np.ndarray) -> np.ndarray:
        """The file's row of each id, −1 for an id not kept yet."""
        found = np.full(len(ids), -1, np.int64)
        if len(self.ids):
            at = np.minimum(np.searchsorted(self.ids, ids), len(self.ids) - 1)
            hit = self.ids[at] == ids
            found[hit] = self.rows[at[hit]]
        if self.recent:
            for i in np.flatnonzero(found < 0):
                found[i] = self.recent.get(int(ids[i]), -1)
        return found

    def lookup(self, indices: torch.Tensor) -> torch.Tensor | None:
        """The kept logits of every sample of `indices`, in their order; None unless all are kept."""
        rows = self.rows_of(indices.cpu().numpy().astype(np.int64))
        if self.values is None or not bool((rows >= 0).all()):
            return None
        return torch.from_numpy(self.values[rows]).to(self.device)

    def store(self, indices: torch.Tensor, logits: torch.Tensor) -> None:
        """Keep the logits of the samples of `indices` not kept yet (while the file has room)."""
        ids = indices.cpu().numpy().astype(np.int64)
        rows = self.rows_of(ids)
        if self.values is None:
            self.device = logits.device
            file = tempfile.TemporaryFile(prefix="congruent-teacher-logits-")  # gone once closed
            self.values = np.memmap(file, np.float32, "w+", shape=(self.capacity, logits.shape[1]))
        new, first = np.unique(ids[rows < 0], return_index=True)
        if self.used + len(new) <= self.capacity:
            positions = np.flatnonzero(rows < 0)[first]
            self.values[self.used : self.used + len(new)] = logits[torch.from_numpy(positions)].float().cpu().numpy()
            self.recent.update(zip(new.tolist(), range(self.used, self.used + len(new))))
            self.used += len(new)
            if len(self.recent) >= self.MERGE_EVERY:
                self._merge()

    def get(self, indices: torch.Tensor, compute: Callable[[], torch.Tensor]) -> torch.Tensor:
        """The kept logits of `indices`; `compute()`'s for a batch with new samples, kept, then read
        back: every sample's logits are its first ones, however it is batched later."""
        found = self.lookup(indices)
        if found is not None:
            return found
        logits = compute()
        self.computed += 1
        self.store(indices, logits)
        kept = self.lookup(indices)  # a sample kept before keeps its first values beside new ones
        return logits if kept is None else kept

    def _merge(self) -> None:
        ids = np.concatenate([self.ids, np.fromiter(self.recent.keys(), np.int64, len(self.recent))])
        rows = np.concatenate([self.rows, np.fromiter(self.recent.values(), np.int64, len(self.recent))])
        order = np.argsort(ids, kind="stable")
        self.ids, self.rows, self.recent = ids[order], rows[order], {}


# torch's note that vmap runs an operator with no batching rule (resnet8's adaptive pooling under
# inference mode, text-transformer's fused encoder layer) one teacher at a time: the logits are the
# loop's (tests/test_teachers.py), and a pool actor's stderr reaches the user's terminal
VMAP_FALLBACK = "There is a performance drop because we have not yet implemented the batching rule"


class FrozenModels:
    """Mean logits of one or more models, in eval mode without gradients:
    φ_ens(x) = (1/m) Σ_i φ^(i)(x) (the ensemble of ELODI; with one model, that model).
    With `precision` "bf16" the forward passes run under bf16 autocast; the mean is fp32 either
    way. Given `split` (the training split as these models read it: text through their own
    tokenizer), a batch is read from it (`of_batch`) instead of the student's inputs; given
    `reader`, a streamed batch (one that carries its samples) is read through it.

    m > 1 models of one architecture (same class, same parameter and buffer shapes) run as one
    batched model: their parameters and buffers stacked (`torch.func.stack_module_state`) and one
    `vmap(functional_call)` over them, so each kernel serves all m teachers. An architecture whose
    eval-mode forward vmap cannot batch (an operator without a batching rule) falls back, once and
    for good, to one forward per model; `stacked` says which path serves (`stack=False`: one forward
    per model from the start, as benchmarks compare). m > 1 LoRA adapter models of one frozen base
    (`shares_one_base`) are held as one base with m adapters and heads instead (`SharedBaseTeachers`:
    one forward of the batch repeated m times); `shared` says so."""

    def __init__(
        self,
        models: Sequence[nn.Module],
        device: str | torch.device = "cpu",
        precision: str = "fp32",
        split: EncodedSplit | None = None,
        stack: bool = True,
        reader: BatchReader | None = None,
        samples: int | None = None,
    ) -> None:
        if not models:
            raise ValueError("FrozenModels needs at least one model")
        self.device = torch.device(device)
        self.precision = precision
        self.split = None if split is None else split.to(self.device)
        self.reader = None if reader is None else reader.to(self.device)
        self.samples = samples  # a streamed split's, for its cache
        self.cache: LogitCache | SampleLogitCache | None = None
        self.models = [
            m.to(self.device, memory_format=torch.channels_last)  # type: ignore[call-overload]  # torch stubs lack (device, memory_format)
            .eval()
            .requires_grad_(False)
            for m in models
        ]
        self.shared = SharedBaseTeachers(self.models) if stack and shares_one_base(self.models) else None
        if self.shared is not None:
            self.models = []  # the m full copies go: the shared base, adapters and heads serve
        self.stacked = stack and self.shared is None and len(self.models) > 1 and _one_architecture(self.models)
        if self.stacked:
            params, buffers = stack_module_state(self.models)
            # contiguous (not channels-last) stacks: vmap has no batching rule for channels-last strides
            self.params = {name: t.detach().contiguous() for name, t in params.items()}
            self.buffers = {name: t.contiguous() for name, t in buffers.items()}
            skeleton = copy.deepcopy(self.models[0]).to("meta")

            def one_model(p: dict[str, torch.Tensor], b: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
                return functional_call(skeleton, (p, b), (x,))

            self.batched = vmap(one_model, in_dims=(0, 0, None))

    @torch.inference_mode()
    def __call__(self, inputs: torch.Tensor) -> torch.Tensor:
        inputs = placed(inputs, self.device)
        if self.shared is not None:
            with autocast(self.device, self.precision):
                return self.shared(inputs)
        if self.stacked:
            try:
                with autocast(self.device, self.precision), warnings.catch_warnings():
                    warnings.filterwarnings("ignore", message=VMAP_FALLBACK, category=UserWarning)
                    return self.batched(self.params, self.buffers, inputs.contiguous()).float().mean(0)
            except RuntimeError as e:  # no batching rule for an operator of this architecture
                warnings.warn(f"teachers run one at a time: vmap cannot batch them ({first_line(e)})", stacklevel=2)
                self.stacked = False
        with autocast(self.device, self.precision):
            total = self.models[0](inputs).float()
            for model in self.models[1:]:
                total = total + model(inputs).float()
        return total / len(self.models)

    def of_batch(self, inputs: torch.Tensor, batch: Batch | None) -> torch.Tensor:
        """The mean logits of the training batch: read from `split` when held, or from a streamed
        batch through `reader` (for inputs without augmentation, computed once per sample:
        `LogitCache` by position, `SampleLogitCache` by a streamed sample's id), else from `inputs`."""
        if self.reader is not None and batch is not None and batch.values is not None:
            return self.of_streamed(batch)
        split = self.split
        if split is None or batch is None:
            return self(inputs)
        if batch.draws is not None or not TEACHER_CACHE:
            return self(split.batch(batch))
        if self.cache is None:
            self.cache = LogitCache(len(split))
        return self.cache.get(batch.indices, lambda: self(split.batch(batch)))

    def of_streamed(self, batch: Batch) -> torch.Tensor:
        """The mean logits of a streamed batch (one that carries its samples), read through
        `reader`; for inputs without augmentation each sample's are computed once (`SampleLogitCache`)."""
        reader = self.reader
        if reader is None:
            raise ValueError("these teachers read no streamed batches: give FrozenModels a reader")
        if batch.draws is not None or not TEACHER_CACHE or self.samples is None:
            return self(reader.batch(batch))
        if self.cache is None:
            self.cache = SampleLogitCache(self.samples)
        return self.cache.get(batch.indices, lambda: self(reader.batch(batch)))


def _one_architecture(models: Sequence[nn.Module]) -> bool:
    """Whether the models share their class and every parameter's and buffer's name, shape and dtype."""

    def layout(model: nn.Module) -> tuple[type, list[tuple[str, tuple[int, ...], torch.dtype]]]:
        tensors = [*model.named_parameters(), *model.named_buffers()]
        return type(model), [(name, tuple(t.shape), t.dtype) for name, t in tensors]

    first = layout(models[0])
    return all(layout(model) == first for model in models[1:])


class LocalTeachers:
    """Teacher logits computed in this process, serially: name → FrozenModels or any function
    `inputs -> logits`. `LocalTeachers(old=FrozenModels([old_model]))`."""

    def __init__(self, **functions: Callable[[torch.Tensor], torch.Tensor]) -> None:
        self.functions = functions
        self.names = tuple(functions)

    def request(self, inputs: torch.Tensor, batch: Batch | None = None) -> Callable[[], Mapping[str, Logits]]:
        def answer(function: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
            return function.of_batch(inputs, batch) if isinstance(function, FrozenModels) else function(inputs)

        return lambda: {name: answer(function) for name, function in self.functions.items()}
