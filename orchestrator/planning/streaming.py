"""Whether a spec's data is streamed, settled in preflight, and what a streamed source supports.

`data.streaming: auto` streams a glob of text-table shards always, and an ImageFolder tree or one
table file when its in-memory footprint (`in_memory_bytes`) is above STREAMING_BUDGET_BYTES or a
quarter of the memory available to this process, whichever is less. `streaming: false` on data
whose footprint is above the memory available fails here, with the figure, instead of in an OOM
kill. The driver opens a streamed source here — the file list, a decoded sample, a text table's
label scan — and the `DataRequest` carries the opened splits to every worker.
"""

from __future__ import annotations

import glob
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from orchestrator.host import available_memory
from pipelines.spec import SpecError, UpdateSpec
from workers.data.streamed import StreamedSplits
from workers.errors import DataError
from workers.names import REPLICA_METHODS, is_glob, is_table
from workers.storage import store
from workers.tasks.records import DataRequest

STREAMING_BUDGET_BYTES = 2 << 30  # pipelines/data_section.py DataSpec.streaming states this figure
TEXT_MEMORY_FACTOR = 4  # a table in memory: texts as Python strings plus their token ids, ≈ 4× its bytes
GiB = float(1 << 30)


def in_memory_holders(spec: UpdateSpec) -> int:
    """Processes on this machine that hold the in-memory splits at once: the driver, and with an
    embedded Ray (no RAY_ADDRESS) the first stage's trainers that this machine's cores run at once."""
    if os.environ.get("RAY_ADDRESS"):
        return 1
    if spec.method.name not in REPLICA_METHODS:
        return 2
    cores = os.cpu_count() or 1
    return 1 + min(getattr(spec.method, "m", 1), max(1, int(cores // spec.resources.replica.cpus)))


def remote_images(request: DataRequest) -> bool:
    """Whether the source is an ImageFolder tree on S3 (`modality: image` on an s3:// prefix)."""
    return store(request.source).remote and request.modality == "image"


def table_folder(request: DataRequest) -> bool:
    """Whether the source is a local folder of text-table shards (the spec names its columns)."""
    return request.kind == "text" and Path(request.source).is_dir()


def table_source(request: DataRequest) -> bool:
    """Whether the source is text tables: a table file or a glob of them, an S3 source that is not
    an ImageFolder tree, or a folder of shards."""
    return not remote_images(request) and (
        is_table(request.source) or store(request.source).remote or table_folder(request)
    )


def streamable(request: DataRequest) -> bool:
    """Whether the source can be streamed: a table file or a glob of shards (local or on S3), an S3
    prefix of table shards or an ImageFolder tree there, or a local ImageFolder tree."""
    source = request.source
    if source in ("fashion-mnist", "tweet-sentiment"):
        return False
    if is_table(source) or store(source).remote:
        return True
    path = Path(source)
    return path.is_dir() and not any(path.glob("train-images-idx3-ubyte*"))


def in_memory_bytes(request: DataRequest) -> int:
    """What the in-memory path would hold in one process: a table's bytes × TEXT_MEMORY_FACTOR, or
    an image tree's files × 3 channels × side² (side: data.image_size, else 256)."""
    source = request.source
    if table_folder(request):
        return TEXT_MEMORY_FACTOR * sum(p.stat().st_size for p in Path(source).rglob("*") if p.is_file())
    if is_table(source):
        files = glob.glob(source) if is_glob(source) else [source]
        return TEXT_MEMORY_FACTOR * sum(os.path.getsize(f) for f in files if os.path.isfile(f))
    side = request.image_size or 256
    count = sum(1 for p in Path(source).rglob("*") if p.is_file())
    return count * 3 * side * side


def settle_streaming(request: DataRequest, holders: int = 1) -> DataRequest:
    """The request with `streaming` decided (True/False) and, when True, its source opened
    (`streamed`); SpecError for a source that cannot stream, or in-memory data that cannot fit in
    the `holders` processes of this machine that would each load it (`in_memory_holders`)."""
    wanted = request.streaming
    only_streamed = is_glob(request.source) or store(request.source).remote or table_folder(request)
    if wanted is True and not streamable(request):
        raise SpecError(
            f"data.streaming: {request.source} is read whole; a stream reads an ImageFolder tree or text tables"
        )
    if wanted == "auto":
        if not streamable(request):
            return replace(request, streaming=False)
        budget = min(STREAMING_BUDGET_BYTES, available_memory() // 4)
        wanted = only_streamed or in_memory_bytes(request) > budget
    if wanted is False:
        if only_streamed:
            raise SpecError(
                "data.streaming: false, but a glob or a folder of shards, or an s3:// source, is only read as a stream"
            )
        if streamable(request):
            copy, have = in_memory_bytes(request), available_memory()
            if copy * holders > have:
                held = "the driver" if holders == 1 else f"the driver and {holders - 1} trainer(s) at once"
                raise SpecError(
                    f"data.streaming: false needs about {copy * holders / GiB:.1f} GiB to hold {request.source} "
                    f"in memory ({copy / GiB:.1f} GiB in each of {held}), {have / GiB:.1f} GiB are available; "
                    "set streaming: true"
                )
        return replace(request, streaming=False)
    return replace(request, streaming=True, streamed=open_streamed(request))


def open_streamed(request: DataRequest) -> StreamedSplits:
    """The request's source opened as streamed splits (DataError for unusable data)."""
    from orchestrator.dataplane.image_streams import open_image_stream
    from orchestrator.dataplane.table_streams import open_table_stream

    chosen: dict[str, Any] = {
        "val_fraction": request.val_fraction,
        "eval_fraction": request.eval_fraction,
        "subset": request.subset,
        "train_limit": request.train_limit,
        "eval_limit": request.eval_limit,
    }
    if table_source(request):
        return open_table_stream(
            request.source,
            request.text_column,
            request.label_column,
            request.encoding,
            request.num_classes,
            id_column=request.id_column,
            **chosen,
        )
    if request.id_column is not None:
        raise DataError(
            f"{request.source}: data.id_column names a column of a text table; images are named by their path"
        )
    return open_image_stream(
        request.source, request.num_classes, request.image_size, **chosen, skip_corrupt=request.skip_corrupt
    )


def stream_problems(request: DataRequest) -> list[str]:
    """What a streamed source does not support yet, one line each."""
    problems = []
    if request.skip_corrupt and (request.streamed is None or request.streamed.train.modality != "image"):
        problems.append("data.skip_corrupt: only a streamed ImageFolder tree leaves files out (data.streaming: true)")
    if request.unlabelled is not None and request.streamed is not None:
        problems.append(
            "data.unlabelled: unlabelled texts go with data held in memory, and this source streams "
            "(set data.streaming: false, or leave unlabelled out)"
        )
    return problems
