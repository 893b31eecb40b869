"""A streamed ImageFolder tree (one sub-directory per class; PNG, JPEG, WebP, …): split from its file
list alone (a sample's key is its path relative to the root, workers/data/keys.py), read and decoded
by Ray Data's CPU workers in batches, each image resized and centre-cropped to `image_size` exactly as
the in-memory loader does (`workers.pixels.pixels`, `workers.data.images.fit_to_size`), so both paths give the same
uint8 pixels. The order and its determinism are orchestrator/dataplane/table_streams.py's.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from orchestrator.dataplane.image_tasks import decode_images
from orchestrator.dataplane.ray_reading import data_error, files_dataset, tensor
from orchestrator.dataplane.table_streams import SHUFFLE_BUFFER, split_fingerprint
from workers.data.batches import Batch
from workers.data.formats.image_folder import SAMPLED, image_problem, is_colour, square_side
from workers.data.input_spec import InputSpec
from workers.data.keys import EVAL, TRAIN, VAL, key_ids, split_codes
from workers.data.selection import split_selection
from workers.data.streamed import StreamedSplit, StreamedSplits
from workers.errors import DataError
from workers.storage import join, listing, read_bytes, store

IMAGE_FORMATS = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".gif", ".tif", ".tiff")
DECODE_BATCH = 256  # images one reading task decodes at a time


class ImageSplit(StreamedSplit):
    """One split of an ImageFolder tree: its files (relative to `root`) and their labels."""

    modality = "image"

    def __init__(
        self,
        root: str,
        files: list[str],
        labels: torch.Tensor,
        classes: tuple[str, ...],
        channels: int,
        size: int,
        resize: bool = True,  # every image resized and centre-cropped to `size` (False: each must be size²)
    ) -> None:
        self.root, self.files, self.labels, self.classes = root, files, labels, classes
        self.ids = torch.from_numpy(key_ids(files))
        self.channels, self.side, self.resize = channels, size, resize

    @property
    def in_channels(self) -> int:
        return self.channels

    @property
    def image_size(self) -> int:
        return self.side

    def _batches(self, seed: int | None, batch_size: int) -> Iterator[Batch]:
        paths = [os.path.join(self.root, f) for f in self.files]
        shape = {"channels": self.in_channels, "size": self.image_size, "resize": self.resize}
        decoded = files_dataset(paths, seed, decode_images, DECODE_BATCH, root=self.root, classes=self.classes, **shape)
        buffer = None if seed is None else SHUFFLE_BUFFER * batch_size
        try:
            for rows in decoded.iter_batches(
                batch_size=batch_size, batch_format="numpy", local_shuffle_buffer_size=buffer, local_shuffle_seed=seed
            ):
                ids = key_ids(list(rows["key"]))
                yield Batch(tensor(ids), values=tensor(rows["image"]), labels=tensor(rows["label"]))
        except Exception as e:
            error = data_error(e)
            if error is None:
                raise
            raise error from None

    def epoch(self, batch_size: int, seed: int, epoch: int, inputs: InputSpec | None = None) -> Iterator[Batch]:
        return self._batches(seed * 100_003 + epoch, batch_size)

    def statistics_images(self, limit: int, batch: int = DECODE_BATCH) -> Iterator[torch.Tensor]:
        """`limit` images spread evenly over this split's files (every class folder), decoded here
        batch by batch, uint8 B×C×S×S: what preflight takes statistics over without starting Ray
        (Ray Data would start one with none of the run's settings); summed as they come, never held."""
        chosen = np.unique(np.linspace(0, len(self.files) - 1, min(limit, len(self.files))).astype(int))
        for start in range(0, len(chosen), batch):
            paths = np.array(
                [os.path.join(self.root, self.files[i]) for i in chosen[start : start + batch]], dtype=object
            )
            rows = decode_images(
                {"file": paths}, self.root, self.classes, self.in_channels, self.image_size, self.resize
            )
            yield torch.from_numpy(rows["image"])

    def chunks(self, batch_size: int, inputs: InputSpec | None = None) -> Iterator[Batch]:
        return self._batches(None, batch_size)


def read_checked(paths: list[str]) -> tuple[dict[str, tuple[int, str]], dict[str, str]]:
    """Each file read once: its size and the sha256 of its bytes, and for a file that is not a
    readable image why (`image_problem`)."""
    digests, problems = {}, {}
    for path in paths:
        data = Path(path).read_bytes()
        digests[path] = (len(data), hashlib.sha256(data).hexdigest())
        problem = image_problem(data)
        if problem is not None:
            problems[path] = problem
    return digests, problems


def tree_files(root: str, skip_corrupt: bool) -> tuple[tuple[str, ...], list[str], list[int], dict, dict[str, str]]:
    """An ImageFolder tree's class folders, its image files (relative to `root`, sorted per class)
    and their labels, each file's (size, checksum) and the files that are not readable images
    (`image_problem`). A local tree is read whole: the checksum is its bytes' sha256 and every file
    is checked. A tree on S3 is listed, not read: the checksum is the object's ETag, and a corrupt
    image fails the run, with its key, when a reading task decodes it (so no `skip_corrupt`)."""
    if store(root).remote:
        if skip_corrupt:
            raise DataError(
                f"{root}: data.skip_corrupt needs every image read before training; "
                "an ImageFolder on s3:// is listed, not read (a corrupt image fails the run with its key)"
            )
        prefix = root.rstrip("/") + "/"
        listed = [entry for entry in listing(prefix, IMAGE_FORMATS) if "/" in entry.uri.removeprefix(prefix)]
        relative = [entry.uri.removeprefix(prefix) for entry in listed]
        classes = tuple(sorted({name.split("/")[0] for name in relative}))
        ordered = sorted(zip(relative, listed), key=lambda pair: (pair[0].split("/")[0], pair[0]))
        files = [name for name, _ in ordered]
        labels = [classes.index(name.split("/")[0]) for name in files]
        return classes, files, labels, {entry.uri: (entry.size, entry.etag) for _, entry in ordered}, {}
    base = Path(root)
    if not base.is_dir():
        raise DataError(f"{root}: no such directory")
    classes = tuple(sorted(d.name for d in base.iterdir() if d.is_dir()))
    files, labels = [], []
    for c, name in enumerate(classes):
        inside = (base / name).rglob("*")
        found = sorted(str(p.relative_to(base)) for p in inside if p.is_file() and p.suffix.lower() in IMAGE_FORMATS)
        files += found
        labels += [c] * len(found)
    digests, problems = read_checked([str(base / f) for f in files])
    return classes, files, labels, digests, problems


def open_image_stream(
    root: str,
    num_classes: int | None = None,
    image_size: int | None = None,
    val_fraction: float = 0.1,
    eval_fraction: float = 0.2,
    skip_corrupt: bool = False,
    subset: str = "all",
    train_limit: int | None = None,
    eval_limit: int | None = None,
) -> StreamedSplits:
    """An ImageFolder tree (a local directory, or an s3:// prefix: `tree_files`) as three streamed
    splits, from its file list and a decoded sample of SAMPLED images (its channels: 3 if any is
    colour; its size, without `image_size`). A local tree's files are each read once for the
    fingerprint and checked (`image_problem`): the first that is not a readable image fails with
    its path, or with `skip_corrupt` each is left out of the splits (`skipped`). A file's split,
    and whether `subset` and the limits keep it, follow from its id (workers/data/keys.py,
    selection.py), as in memory."""
    base = join(root)  # its store's spelling: no trailing `/`
    classes, files, labels, digests, problems = tree_files(base, skip_corrupt)
    if problems and not skip_corrupt:
        path, why = next(iter(problems.items()))
        more = f" ({len(problems)} such files)" if len(problems) > 1 else ""
        raise DataError(f"{path}: cannot read image ({why}){more}; data.skip_corrupt: true leaves such files out")
    kept = [i for i, f in enumerate(files) if os.path.join(base, f) not in problems]
    files, labels = [files[i] for i in kept], [labels[i] for i in kept]
    if len(classes) < 2 or not files:
        raise DataError(f"{root}: an ImageFolder tree needs image files in at least two class folders")
    if num_classes is not None and num_classes != len(classes):
        raise DataError(f"{root}: {len(classes)} class folders, but data.num_classes = {num_classes}")
    sample = [files[i] for i in np.linspace(0, len(files) - 1, min(SAMPLED, len(files))).astype(int)]
    paths = [os.path.join(base, f) for f in sample]
    channels = 3 if any(is_colour(read_bytes(path), path) for path in paths) else 1
    # without image_size, a tree of S×S images of one S
    size, resize = image_size or square_side(read_bytes(paths[0]), paths[0]), image_size is not None
    ids = key_ids(files)
    codes = split_codes(ids, val_fraction, eval_fraction)
    all_labels = np.array(labels, dtype=np.int64)
    limits = {TRAIN: train_limit, EVAL: eval_limit}
    splits = []
    for code, name in ((TRAIN, "train"), (VAL, "val"), (EVAL, "eval")):
        inside = np.nonzero(codes == code)[0]
        ids_in, labels_in = ids[inside], all_labels[inside]
        selection = split_selection(code, subset, len(classes), limits.get(code), ids_in, labels_in, root)
        chosen = inside[selection.mask(ids_in, labels_in)]
        if len(chosen) == 0:
            raise DataError(f"{root}: no image falls in the {name} split; too few images")
        chosen_files = [files[i] for i in chosen]
        labels_of = torch.from_numpy(all_labels[chosen])
        splits.append(ImageSplit(base, chosen_files, labels_of, classes, channels, size, resize))
    fractions = (val_fraction, eval_fraction)
    fingerprint = split_fingerprint(
        [os.path.join(base, f) for f in files], base, fractions, digests, f"eval_limit {eval_limit}"
    )
    skipped = tuple(sorted(os.path.relpath(p, base) for p in problems))
    return StreamedSplits(splits[0], splits[1], splits[2], fingerprint, root, skipped)
