"""Reading files on Ray Data, for the table and image streams alike: a dataset of file names whose
`map_batches` tasks read them (`files_dataset`: zero-CPU tasks, at most READERS at once, in a
seeded order; table_streams.py's docstring says why), the context every stream reads in
(`ordered_context`), and what the consumer does with what Ray Data hands over (`tensor`,
`data_error`). Split from table_streams.py, behaviour unchanged."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from orchestrator.dataplane.objects import reader_env
from workers.errors import DataError
from workers.storage import store

READERS = 2  # map_batches tasks reading at once, per stream
STREAM_OBJECT_STORE_BYTES = 128 << 20  # one stream's blocks in the object store at once (Ray Data's budget)


def ordered_context() -> None:
    """Ray Data in this process: blocks in order (a seeded order stays seeded), at most
    STREAM_OBJECT_STORE_BYTES of them in the object store (left to itself, Ray Data lets the readers
    run ahead of the trainer until blocks fill a share of the whole store: memory that grows with the
    data up to the store's size), no progress bars."""
    from ray.data import DataContext, ExecutionResources

    context = DataContext.get_current()
    context.execution_options.preserve_order = True
    context.execution_options.resource_limits = ExecutionResources(object_store_memory=STREAM_OBJECT_STORE_BYTES)
    context.raise_original_map_exception = True  # a reading task's DataError reaches the driver as one
    context.enable_progress_bars = False
    context.print_on_execution_start = False
    logging.getLogger("ray.data").setLevel(logging.WARNING)  # no line per executed dataset
    # nor, once per process, "Progress bars disabled. To enable, set …" (a warning of Ray Data's own
    # that tells a user of Congruent how to turn on what Congruent turned off on purpose)
    logging.getLogger("ray.data._internal.progress").setLevel(logging.ERROR)


def files_dataset(files: Sequence[str], seed: int | None, read: Callable[..., Any], batch: int, **kwargs: Any) -> Any:
    """A Ray dataset of what `read(rows, **kwargs)` makes of `files` (`batch` names a call), in
    an order seeded by `seed` (None: as given), read by zero-CPU tasks (module docstring)."""
    import ray.data

    ordered_context()
    order = list(files) if seed is None else [files[i] for i in np.random.default_rng(seed).permutation(len(files))]
    names = ray.data.from_items([{"file": name} for name in order])
    # no more readers than calls (Ray Data warns, on the user's terminal, of a pool it cannot fill)
    pool = ray.data.TaskPoolStrategy(size=max(1, min(READERS, math.ceil(len(order) / batch))))
    env = {"env_vars": reader_env()} if files and store(files[0]).remote else None
    return names.map_batches(read, batch_size=batch, num_cpus=0, compute=pool, fn_kwargs=kwargs, runtime_env=env)


def tensor(array: np.ndarray) -> torch.Tensor:
    """A tensor of a numpy column Ray Data handed over (read-only: copied then)."""
    return torch.from_numpy(np.require(array, requirements=["C", "W"]))


def data_error(error: BaseException) -> DataError | None:
    """The DataError a Ray Data task raised, however Ray wrapped it (None if it was not one)."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, DataError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None
