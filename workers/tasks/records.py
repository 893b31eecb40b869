"""The records a stage works from and reports: `DataRequest` (what data a job reads), `TrainJob`
(one model to train and where its checkpoint goes), `TrainRecord` and `BcwiRecord` (what the stage
returns to the driver). Plain dataclasses, pickled to Ray workers and back."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from workers.data.input_spec import InputSpec
from workers.data.protected_rows import ProtectedRows
from workers.data.streamed import StreamedSplits
from workers.training.config import TrainConfig
from workers.training.objectives import Objective


@dataclass(frozen=True)
class DataRequest:
    """What `load_splits` needs; hashable so each worker process loads a dataset once. The fields
    are the spec's `data` section (pipelines/spec.py `DataSpec`) but `dataset`/`path` → `source`."""

    source: str = "fashion-mnist"
    subset: str = "all"
    train_limit: int | None = None
    eval_limit: int | None = None
    val_fraction: float = 0.1
    eval_fraction: float = 0.2
    num_classes: int | None = None  # declared class count (labels with gaps); None: the largest id + 1
    text_column: str = "text"
    label_column: str = "label"
    encoding: str = "utf-8"
    id_column: str | None = None  # a text table's column naming each sample (None: its content)
    image_size: int | None = None  # images resized and centre-cropped to image_size² (None: as stored)
    # a table of texts without labels that an ELODI student also distils on; out of the repr, which names the
    # fidelity benchmark's cached models (benchmarks/fidelity/trainings.py `digest` adds it where it is set)
    unlabelled: str | None = field(default=None, repr=False)
    streaming: bool | str = False  # as the spec says: true, false or "auto" (preflight decides)
    streamed: StreamedSplits | None = None  # the streamed splits preflight opened (then no process loads the data)
    skip_corrupt: bool = False  # a streamed ImageFolder: files that are not readable images left out, counted
    modality: str = "auto"  # as the spec says: auto, image (an ImageFolder tree on s3://) or text
    kind: str = "image"  # what the data is, the spec's `data.kind`: "image" or "text"
    # the model's protected samples that join train (`train.protected_weight`); out of the repr like `unlabelled`
    protected: ProtectedRows | None = field(default=None, repr=False)
    # auto's cross-fitting: (k, K), train = train ∪ val outside fold k, val = fold k (workers/data/folds.py)
    fold: tuple[int, int] | None = None


STREAM_FIELDS = (
    "streaming",
    "streamed",
    "skip_corrupt",
    "modality",
    "kind",
    "protected",
    "fold",
)  # DataRequest fields that are not load_splits' arguments


@dataclass(frozen=True)
class TrainJob:
    """One model to train and where its checkpoint goes (a local path or an S3 URI)."""

    name: str
    data: DataRequest
    arch: str
    config: TrainConfig
    checkpoint_uri: str
    objective: Objective = field(default_factory=Objective)
    init_from: str | None = None  # start from this checkpoint's weights, same model (BCWI; `init: old`)
    init: str | None = None  # start from torchvision weights or a state_dict file (models/starting_weights.py)
    allow_user_factories: bool = False
    nfr_reference: str | None = None  # old model's checkpoint: each epoch records the val NFR against it
    teachers: tuple[tuple[str, tuple[str, ...]], ...] = ()  # in-process references: (name, checkpoints)
    inputs: InputSpec | None = None  # what the model reads: a tokenizer, images' normalisation; None: the data's images


@dataclass
class TrainRecord:
    """What one training reports: where its checkpoint is, its per-epoch history, how much it
    trained (epochs_run 0: a finished checkpoint was reused; resumed_from > 0: after a retry or a
    rerun), where and how long it ran, and — for a distilled student — the teacher pool's count of
    batches (`teacher_batches`)."""

    name: str
    seed: int
    checkpoint: str
    history: list[dict[str, Any]]
    steps: int
    epochs_run: int
    resumed_from: int
    steps_run: int
    val_error_rate: float | None
    pid: int
    host: str
    seconds: float
    node_id: str | None = None  # comma-separated for a data-parallel stage: every node a worker ran on
    teacher_batches: dict[str, Any] | None = None
    classes_seen: list[int] | None = None  # the class ids of its training split
    config: dict[str, Any] = field(default_factory=dict)  # the TrainConfig it ran with (precision, compile, …)
    parameters: dict[str, int] = field(default_factory=dict)  # the model's parameter count: total, trainable


@dataclass(frozen=True)
class BcwiRecord:
    """BCWI's pick: α, the val sweep ({alpha, error_rate, nfr} per α), the interpolated checkpoint,
    and the pick's cross-fitted val {error_rate, nfr} (workers/training/bcwi.py `cross_fitted`)."""

    alpha: float
    sweep: list[dict[str, float]]
    checkpoint: str
    classes_seen: list[int] | None = None
    held_out: dict[str, float] | None = None
    held_out_classes: dict[int, int] | None = None  # sample id → its class at the α the other val half picked
