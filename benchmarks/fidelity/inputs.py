"""What a fidelity mode's models read: the data of its set, and a version's inputs as the pipeline
gives them to its architecture."""

from __future__ import annotations

import csv
from functools import lru_cache
from pathlib import Path

from workers.data.input_spec import InputSpec
from workers.data.text import TextSet
from workers.data.text_tables import NEWSGROUPS_CSV, REUTERS_R8_CSV
from workers.tasks.records import DataRequest
from workers.tasks.resolve import cached_splits

TABLES = {"reuters-r8": REUTERS_R8_CSV, "20newsgroups": NEWSGROUPS_CSV}  # text sets `make` installs as tables


def request_of(dataset: str, train_limit: int | None, eval_limit: int | None, val_fraction: float = 0.1) -> DataRequest:
    """The data of a mode's `dataset` (a built-in name, or a text table of TABLES) cut to the slices."""
    table = TABLES.get(dataset)
    if table is None:
        return DataRequest(dataset, train_limit=train_limit, eval_limit=eval_limit, val_fraction=val_fraction)
    return DataRequest(
        str(table),
        train_limit=train_limit,
        eval_limit=eval_limit,
        val_fraction=val_fraction,
        id_column="id",
        kind="text",
    )


@lru_cache(maxsize=8)
def inputs_of(data: DataRequest, arch: str, max_length: int | None) -> InputSpec:
    """The pipeline's own inputs of `arch` on this training split (`text_inputs`, which reads only
    the spec's arch and tokenizer sections): a tokenizer trained on it (text-linear: with its idf),
    or an hf: model's own, cut at `max_length` (None: auto)."""
    from orchestrator.planning.model_inputs import text_inputs
    from pipelines.spec import parse_spec

    train = cached_splits(data).train
    assert isinstance(train, TextSet)
    document = {"model": "fidelity", "version": "v", "arch": arch, "data": {"dataset": "tweet-sentiment"}}
    if max_length is not None:
        document["tokenizer"] = {"max_length": max_length}
    return text_inputs(parse_spec(document), train)


def first_texts(data: DataRequest, folder: Path) -> Path:
    """A CSV (column `text`) of the texts of `data`'s training split, written once into `folder`:
    what `data.unlabelled` reads (the first `train_limit` training samples by rank, labels dropped)."""
    path = folder / f"unlabelled-first-{data.train_limit}.csv"
    if not path.exists():
        train = cached_splits(data).train
        assert isinstance(train, TextSet), "unlabelled inputs are texts"
        folder.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        with partial.open("w", newline="", encoding="utf-8") as f:
            csv.writer(f).writerows([("text",), *((text,) for text in train.texts)])
        partial.replace(path)
    return path
