"""The data `congruent predict` scores, on Ray Data: a text table (one file, a directory or glob of
shards, local or on S3, read by the format's reader in workers/data/formats/) or a folder of images
(an ImageFolder tree, whose class folders are the labels, or images without labels), listed and
checked here, then read by zero-CPU tasks (ray_reading.py `files_dataset`) into rows of
`id, payload, label` that an actor pool scores (workers/models/scoring.py `VersionScorer`).

A row's id is the one the training data plane gives the same sample (workers/data/keys.py): its
`id_column` value, else its stripped text, or an image's path relative to the root — so predictions
meet a version's ledger sample by sample. A label stays the text it is in the data; the driver maps
it to each version's classes. A text that is null, or an image that cannot be read, is a row that
fails (the scorer writes why), not a failed read.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from orchestrator.dataplane.image_streams import IMAGE_FORMATS
from orchestrator.dataplane.ray_reading import files_dataset
from orchestrator.dataplane.table_streams import listed_shards, shard_columns
from workers.data.formats.tables import table_format
from workers.data.keys import key_ids, text_keys
from workers.errors import DataError
from workers.models.scoring import VersionScorer
from workers.storage import join, listing, open_input, read_bytes, store


@dataclass(frozen=True)
class PredictionData:
    """What `congruent predict` reads: table shards (`suffix` set) or image files (`root` set)."""

    files: tuple[str, ...]
    suffix: str = ""  # a table's format; "" for images
    root: str = ""  # the images' folder; "" for a table
    text_column: str = ""
    label_column: str | None = None  # None: the data has no labels
    id_column: str | None = None
    encoding: str = "utf-8"

    @property
    def modality(self) -> str:
        return "image" if self.root else "text"

    @property
    def columns(self) -> list[str]:
        return [c for c in (self.text_column, self.label_column, self.id_column) if c]


def table_data(
    path: str, text_column: str, label_column: str | None, id_column: str | None, encoding: str, label_named: bool
) -> PredictionData:
    """A table's shards, checked: one format, none empty, columns alike, each with the text column
    (and `id_column`); labelled when it has `label_column` (a `label_named` column must be there)."""
    files, suffix, listed = listed_shards(path)
    wanted = [
        text_column,
        *([id_column] if id_column else []),
        *([label_column] if label_named and label_column else []),
    ]
    names = shard_columns(files, suffix, encoding, listed, wanted)
    labelled = label_column if label_column and label_column in names else None
    return PredictionData(tuple(files), suffix, "", text_column, labelled, id_column, encoding)


def image_data(path: str) -> PredictionData:
    """A folder's image files (local or an S3 prefix), sorted; labelled by class folder when every
    image is in a sub-folder of `path` (an ImageFolder tree)."""
    root = path.rstrip("/")
    if not store(root).remote and not os.path.isdir(root):  # an S3 prefix is no object to look for
        raise DataError(f"{path}: no such folder of images")
    base = join(root) + "/"
    relative = [entry.uri.removeprefix(base) for entry in listing(root + "/", IMAGE_FORMATS)]
    if not relative:
        raise DataError(f"{path}: no image files ({', '.join(IMAGE_FORMATS)}) there")
    labelled = all("/" in name for name in relative)
    return PredictionData(
        tuple(f"{root}/{name}" for name in sorted(relative)), root=root, label_column=("folder" if labelled else None)
    )


def table_rows(rows: dict[str, np.ndarray], data: PredictionData) -> Iterator[dict[str, np.ndarray]]:
    """Each named shard's rows as `id, payload, label` (the function `map_batches` runs), one record
    batch at a time: bounded memory."""
    reader = table_format(data.suffix)
    for file in rows["file"]:
        name = str(file)
        for table in reader.batches(partial(open_input, name), data.suffix, data.encoding, data.columns):
            texts = [t if isinstance(t, str) else None for t in table.column(data.text_column).to_pylist()]
            if data.id_column:
                keys = ["" if v is None else str(v).strip() for v in table.column(data.id_column).to_pylist()]
            else:
                keys = text_keys([t or "" for t in texts])
            labels = (
                [None if v is None else str(v).strip() or None for v in table.column(data.label_column).to_pylist()]
                if data.label_column
                else [None] * len(texts)
            )
            yield {
                "id": key_ids(keys),
                "payload": np.array(texts, dtype=object),
                "label": np.array(labels, dtype=object),
            }


def image_rows(rows: dict[str, np.ndarray], data: PredictionData) -> dict[str, np.ndarray]:
    """A batch of image files as `id, payload, label`: the bytes of each (None where unreadable: the
    scorer writes the row's error) and its class folder where the tree has them."""
    paths = [str(p) for p in rows["file"]]
    relative = [p.removeprefix(data.root + "/") for p in paths]
    payloads: list[bytes] = []
    for path in paths:
        try:
            payloads.append(read_bytes(path))
        except (DataError, OSError):
            payloads.append(b"")  # not an image: the scorer writes the row's error
    labels = [name.split("/")[0] if data.label_column else None for name in relative]
    return {
        "id": key_ids(relative),
        "payload": np.array(payloads, dtype=object),
        "label": np.array(labels, dtype=object),
    }


IMAGE_FILES_PER_READ = 64  # image files one reading call reads


def scored_dataset(
    data: PredictionData,
    checkpoints: dict[str, str],
    batch_size: int,
    concurrency: int,
    cpus: float,
    gpus: float,
    allow_user_factories: bool = False,
    other_scorers: Sequence[tuple[type, dict[str, Any]]] = (),
) -> Any:
    """A Ray dataset of the data's rows with each version's answer (`VersionScorer`'s columns),
    scored by `concurrency` actors of `cpus` CPUs and `gpus` GPUs, `batch_size` rows a call, in the
    order the files were listed. Each of `other_scorers` (a callable class and its constructor's
    arguments: a model outside Congruent, tracking/foreign_models.py) adds its columns first, in an
    actor pool of its own, and passes the payload on."""
    import ray.data

    if data.root:
        read = files_dataset(list(data.files), None, image_rows, IMAGE_FILES_PER_READ, data=data)
    else:
        read = files_dataset(list(data.files), None, table_rows, 1, data=data)
    for scorer, arguments in other_scorers:
        read = read.map_batches(
            scorer,
            fn_constructor_kwargs=arguments,
            batch_size=batch_size,
            compute=ray.data.ActorPoolStrategy(size=concurrency),
            num_cpus=cpus,
        )
    return read.map_batches(
        VersionScorer,
        fn_constructor_kwargs={
            "checkpoints": checkpoints,
            "device": "cuda" if gpus else "cpu",
            "allow_user_factories": allow_user_factories,
        },
        batch_size=batch_size,
        compute=ray.data.ActorPoolStrategy(size=concurrency),
        num_cpus=cpus,
        num_gpus=gpus,
    )
