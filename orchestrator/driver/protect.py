"""`congruent protect`: samples a model's later versions must keep (orchestrator/tracking/protected.py).

Rows come from a table of the model's kind (a text model: its spec's text, label and id columns,
labels among its classes; an image model: a folder of class folders, CLASS/FILE, as its data is laid
out) or from a version's negative flips against its parent (`--from-flips V`: the samples its ledger
shows the parent right and it wrong, with their eval labels, their texts or image files read back
from the version's own data by sample id), so yesterday's regression becomes today's test. An image
sample's encoded file is kept with the set.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

from orchestrator.dataplane.image_streams import IMAGE_FORMATS
from orchestrator.dataplane.table_streams import listed_shards
from orchestrator.driver.predicted_versions import ScoredVersion, scored_version
from orchestrator.tracking import protected, registry
from orchestrator.tracking.ledger import COMPARED, known_mask, shared_samples
from orchestrator.tracking.promotion import champion_of
from orchestrator.tracking.version_refs import RegistryError, VersionRef
from workers.data.formats.image_folder import image_problem
from workers.data.formats.rows import listed
from workers.data.formats.tables import table_format
from workers.data.keys import key_ids, text_keys
from workers.data.text_tables import id_keys
from workers.errors import DataError, first_line
from workers.names import TEXT_FORMATS
from workers.storage import open_input


def reference_version(model: str) -> ScoredVersion:
    """The version whose classes and columns a protected table is read by: the champion, else the
    latest version; RegistryError when the model has none."""
    champion = champion_of(model)
    listed_versions = registry.versions(model)
    if champion is None and not listed_versions:
        raise RegistryError(f"no registered model {model!r}")
    return scored_version(f"{model}/{champion or listed_versions[-1].version}")


@dataclass(frozen=True)
class Rows:
    """Samples to protect: ids, inputs (texts, or images' paths under their folder), class ids, and
    an image model's encoded files."""

    ids: np.ndarray
    inputs: list[str]
    labels: np.ndarray
    images: list[bytes] | None = None


def folder_images(root: Path) -> tuple[list[str], list[Path]]:
    """(keys, files) of a local folder's image files, sorted: a key is the path under `root`, as the
    data's image samples are named (workers/data/keys.py)."""
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_FORMATS)
    return [p.relative_to(root).as_posix() for p in files], files


def encoded(files: list[Path]) -> list[bytes]:
    """Each file's bytes; DataError naming the first that is not a readable image."""
    out = []
    for file in files:
        data = file.read_bytes()
        problem = image_problem(data)
        if problem is not None:
            raise DataError(f"{file}: not a readable image ({problem})")
        out.append(data)
    return out


def image_rows(path: str, version: ScoredVersion) -> Rows:
    """The images of a folder laid out as the model's data (CLASS/FILE, each CLASS one of the
    version's classes); DataError naming the folder or file of the first problem."""
    root = Path(path)
    if not root.is_dir():
        raise DataError(f"{path}: not a local folder of class folders (CLASS/FILE images)")
    keys, files = folder_images(root)
    if not keys:
        raise DataError(f"{path}: no image files ({', '.join(IMAGE_FORMATS)}) there")
    loose = next((k for k in keys if k.count("/") != 1), None)
    if loose is not None:
        raise DataError(f"{path}: {loose} is not directly in a class folder (CLASS/FILE)")
    index = {name: i for i, name in enumerate(version.classes)}
    unknown = next((k.split("/")[0] for k in keys if k.split("/")[0] not in index), None)
    if unknown is not None:
        raise DataError(f"{path}: folder {unknown!r} is not a class of {version.shown} ({', '.join(version.classes)})")
    labels = np.array([index[k.split("/")[0]] for k in keys], np.int64)
    return Rows(key_ids(keys), keys, labels, encoded(files))


def table_rows(path: str, version: ScoredVersion) -> Rows:
    """(ids, texts, class ids) of a table read as `version` reads its data; DataError naming the
    file and column of the first problem: another format, a missing column, a blank text, a label
    that is not one of the version's classes, an id given twice."""
    file = Path(path)
    suffix = file.suffix.lower()
    if suffix not in TEXT_FORMATS or not file.is_file():
        raise DataError(f"{path}: not a local {', '.join(TEXT_FORMATS)} table")
    reader = table_format(suffix)

    def column(name: str) -> list[object]:
        try:
            values, names = reader.column(file, suffix, version.encoding, name)
        except (OSError, UnicodeDecodeError, ValueError) as e:
            raise DataError(f"{path}: cannot read ({first_line(e)})") from None
        if values is None:
            raise DataError(f"{path}: no column {name!r}; the columns are {listed(names)}")
        return values

    texts, labels = column(version.text_column), column(version.label_column)
    blank = next((i for i, t in enumerate(texts) if not isinstance(t, str) or not t.strip()), None)
    if blank is not None:
        raise DataError(f"{path}: row {blank + 1} has no text in column {version.text_column!r}")
    index = {name: i for i, name in enumerate(version.classes)}
    unknown = next((v for v in labels if str(v).strip() not in index), None)
    if unknown is not None:
        raise DataError(
            f"{path}: label {unknown!r} in column {version.label_column!r} is not a class of {version.shown} "
            f"({', '.join(version.classes)})"
        )
    if version.id_column:
        keys = id_keys(path, column(version.id_column), version.id_column)
    else:
        keys = text_keys([str(t) for t in texts])
        seen: set[str] = set()
        for key in keys:
            if key in seen:
                raise DataError(f"{path}: the text {key[:40]!r} is given twice; a sample is protected once")
            seen.add(key)
    return Rows(key_ids(keys), [str(t) for t in texts], np.array([index[str(v).strip()] for v in labels], np.int64))


def flip_rows(model: str, version: str) -> Rows:
    """The negative flips of `version` against its parent, from their ledgers, their texts (or image
    files) read from the version's data by id; RegistryError when it has no parent or no flips,
    DataError when its data cannot give them back."""
    scored = scored_version(f"{model}/{version}")
    record = next((r for r in registry.chain(model) if r.version == str(version)), None)
    parent = None if record is None else record.parent_of(model)
    if parent is None:
        raise RegistryError(f"{model} v{version} has no registered parent: it flipped nothing to protect")
    new = registry.ledger_of(VersionRef(model, str(version)), COMPARED)
    old = registry.ledger_of(VersionRef(model, parent), COMPARED)
    in_old, in_new = shared_samples(old, new)
    labels = new["labels"][in_new]
    flipped = known_mask(old, labels) & (old["class_ids"][in_old] == labels) & (new["class_ids"][in_new] != labels)
    ids, labels = new["ids"][in_new][flipped], labels[flipped]
    if not len(ids):
        raise RegistryError(f"{model} v{version} flipped no sample of v{parent}: nothing to protect")
    data = registry.spec_of(VersionRef(model, str(version))).data  # as registered, not as its run's file says
    if data.path is None:
        raise DataError(
            f"{model} v{version} trained on the built-in {data.source}: protect a table of its samples instead"
        )
    if scored.modality == "image":
        return images_by_id(data.path, ids, labels)
    texts = texts_by_id(data.path, scored.text_column, data.id_column, data.encoding, ids)
    missing = [i for i, t in enumerate(texts) if t is None]
    if missing:
        raise DataError(f"{data.path}: {len(missing)} of the flipped samples are no longer in it (by id)")
    return Rows(ids, [str(t) for t in texts], labels)


def images_by_id(path: str, ids: np.ndarray, labels: np.ndarray) -> Rows:
    """The flipped samples' image files in the local image folder the version trained on, by id."""
    root = Path(path)
    if not root.is_dir():
        raise DataError(f"{path}: the flipped images are read back from a local image folder; protect a folder of them")
    keys, files = folder_images(root)
    by_id = dict(zip(key_ids(keys).tolist(), zip(keys, files)))
    missing = [i for i in ids.tolist() if i not in by_id]
    if missing:
        raise DataError(f"{path}: {len(missing)} of the flipped samples are no longer in it (by id)")
    found = [by_id[i] for i in ids.tolist()]
    return Rows(ids, [key for key, _ in found], labels, encoded([file for _, file in found]))


def texts_by_id(path: str, text_column: str, id_column: str | None, encoding: str, ids: np.ndarray) -> list[str | None]:
    """The text of each of `ids` in the table at `path` (None where none has that id)."""
    files, suffix, _ = listed_shards(path)
    reader = table_format(suffix)
    wanted = set(ids.tolist())
    found: dict[int, str] = {}
    columns = [text_column, *([id_column] if id_column else [])]
    for file in files:
        for table in reader.batches(partial(open_input, file), suffix, encoding, columns):
            texts = [t if isinstance(t, str) else "" for t in table.column(text_column).to_pylist()]
            if id_column:
                keys = ["" if v is None else str(v).strip() for v in table.column(id_column).to_pylist()]
            else:
                keys = text_keys(texts)
            for sample, text in zip(key_ids(keys).tolist(), texts):
                if sample in wanted:
                    found.setdefault(sample, text)
    return [found.get(int(i)) for i in ids.tolist()]


def protect(model: str, path: str | None, from_flips: str | None) -> tuple[int, int, int]:
    """Add a table's rows or a version's flips to the model's protected set: (set version, rows
    added, rows in the set)."""
    if from_flips is not None:
        rows = flip_rows(model, from_flips)
        origin = f"flips of v{from_flips}"
    else:
        assert path is not None
        reference = reference_version(model)
        rows = image_rows(path, reference) if reference.modality == "image" else table_rows(path, reference)
        origin = Path(path).name
    version, added = protected.add_protected(model, rows.ids, rows.inputs, rows.labels, origin, rows.images)
    current = protected.protected_set(model)
    return version, added, 0 if current is None else len(current)


def protect_in_store(model: str, path: str | None, from_flips: str | None) -> tuple[int, int, int]:
    """`protect` against the MLflow store this environment names (`congruent protect`)."""
    from orchestrator.tracking.store import configure

    configure()
    return protect(model, path, from_flips)
