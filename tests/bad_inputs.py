"""The bad-input corpus: malformed specs, checkpoints, data and prediction files, each one a real
`congruent` command line that must fail with one line naming the problem and exit code 2.

Each case is a `BadInput(name, expect, make)`: `make(folder, assets)` writes the case's files into
`folder` and returns the argv; `expect` is a fragment the one stderr line must contain.
`assets` holds what many cases share: a valid old checkpoint and a registry reference whose eval
split differs from the corpus specs' data (see `make_assets`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from workers.models.checkpoints import ModelSettings, save_checkpoint

MODEL = "corpus"
DATA = {"train_limit": 300, "eval_limit": 100}
BASE = {
    "model": MODEL,
    "version": "v2",
    "arch": "mlp-small",
    "data": DATA,
    "method": {"name": "none"},
    "train": {"epochs": 1},
}


@dataclass(frozen=True)
class Assets:
    old_checkpoint: str  # a valid mlp-small checkpoint, 10 classes, 1×28² images
    other_split_reference: str  # NAME@ALIAS of a version evaluated on another eval split


@dataclass(frozen=True)
class BadInput:
    name: str
    expect: str | tuple[str, ...]  # a fragment of the one stderr line, or of each line: one per problem
    make: Callable[[Path, Assets], list[str]]


def make_assets(folder: Path) -> Assets:
    """A valid old checkpoint, and a registered version of it (in the current MLflow store) whose
    `fingerprint` tag names another eval split."""
    import mlflow
    from mlflow import MlflowClient

    from orchestrator.tracking import store

    settings, five = ModelSettings("mlp-small", 10), ModelSettings("mlp-small", 5)
    (folder / "registered").mkdir()
    (folder / "five").mkdir()
    old = save_checkpoint(folder / "registered" / "model.pt", settings.build(seed=3), settings)
    five_classes = save_checkpoint(folder / "five" / "model.pt", five.build(seed=3), five)
    store.configure()
    mlflow.set_experiment(experiment_id=store.experiment_id("corpus-parent"))
    client = MlflowClient()
    client.create_registered_model("corpus-parent")
    # "empty": a version whose run has no checkpoint; "five": one of a 5-class model
    for alias, artifact in (("champion", old), ("empty", None), ("five", five_classes)):
        with mlflow.start_run(run_name=alias) as run:
            if artifact is not None:
                mlflow.log_artifact(str(artifact), "checkpoint")
        version = client.create_model_version(
            "corpus-parent",
            f"runs:/{run.info.run_id}/checkpoint",
            run.info.run_id,
            tags={"fingerprint": "0123456789ab"},
        )
        client.set_registered_model_alias("corpus-parent", alias, version.version)
    return Assets(str(old), "corpus-parent@champion")


def _with(**changes) -> dict:
    """BASE with `section__field=value` changes (None removes the field)."""
    spec = {k: (dict(v) if isinstance(v, dict) else v) for k, v in BASE.items()}
    for dotted, value in changes.items():
        node = spec
        *parents, leaf = dotted.split("__")
        for parent in parents:
            node = node.setdefault(parent, {})
        if value is None:
            node.pop(leaf, None)
        else:
            node[leaf] = value
    return spec


def _run_text(name: str, text: str | bytes) -> Callable[[Path, Assets], list[str]]:
    def make(folder: Path, assets: Assets) -> list[str]:
        path = folder / f"{name}.yaml"
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        return ["run", str(path)]

    return make


def _run_spec(name: str, document: Callable[[Path, Assets], dict] | dict) -> Callable[[Path, Assets], list[str]]:
    def make(folder: Path, assets: Assets) -> list[str]:
        body = document(folder, assets) if callable(document) else document
        path = folder / f"{name}.yaml"
        path.write_text(yaml.safe_dump({**body, "storage": str(folder / "storage")}))
        return ["run", str(path)]

    return make


def _run_with(
    name: str, document: dict, storage: Callable[[Path], str] | None = None, out: Callable[[Path], str] | None = None
) -> Callable[[Path, Assets], list[str]]:
    """`run` of a spec whose storage (and --out) `storage(folder)` (and `out(folder)`) give."""

    def make(folder: Path, assets: Assets) -> list[str]:
        path = folder / f"{name}.yaml"
        where = storage(folder) if storage else str(folder / "storage")
        path.write_text(yaml.safe_dump({**document, "storage": where}))
        return ["run", str(path), *(["--out", out(folder)] if out else [])]

    return make


def _through_a_file(folder: Path) -> Path:
    """A path whose parent is a regular file: no one, root included, can create it."""
    (folder / "plain.txt").write_text("x")
    return folder / "plain.txt"


def _data(write: Callable[[Path], Path]) -> Callable[[Path, Assets], dict]:
    """A spec whose data.path is what `write` creates."""

    def document(folder: Path, assets: Assets) -> dict:
        return _with(data={"path": str(write(folder))})

    return document


def _run_through_file(folder: Path, assets: Assets) -> list[str]:
    """A spec path that cannot be opened even by root: its parent is a regular file."""
    (folder / "plain.txt").write_text("x")
    return ["run", str(folder / "plain.txt" / "spec.yaml")]


CASES = [
    # the spec file itself
    BadInput("yaml-unclosed-bracket", "invalid YAML at line", _run_text("unclosed", "model: [corpus\nversion: v2\n")),
    BadInput(
        "yaml-unclosed-brace-says-why",
        "invalid YAML at line 4: expected ',' or '}', but got ':' (while parsing a flow mapping at line 3: "
        "`data: {train_limit: 3`)",
        _run_text("brace", "model: corpus\nversion: v2\ndata: {train_limit: 3\narch: mlp-small\n"),
    ),
    BadInput(
        "yaml-tab-indent",
        "invalid YAML at line 3: found character '\\t' that cannot start any token",
        _run_text("tabs", "model: corpus\ndata:\n\ttrain_limit: 3\n"),
    ),
    BadInput("yaml-not-a-mapping", "must be a YAML mapping", _run_text("list", "- model\n- version\n")),
    BadInput(
        "auto-budget-too-small",
        "method.budget: 4 trainings leave auto no candidate beside no treatment",
        _run_spec(
            "auto-budget",
            _with(method={"name": "auto", "candidates": ["elodi-legacy", "elodi"], "m": 4, "budget": 4}, old="x.pt"),
        ),
    ),
    BadInput(
        "auto-more-folds-than-the-data-is-cut-into",
        "method.cross_fit: 11 folds, but train ∪ val is cut into 10 (1 / data.val_fraction): at most 10",
        _run_spec(
            "auto-folds", lambda folder, a: _with(method={"name": "auto", "cross_fit": 11}, old=a.old_checkpoint)
        ),
    ),
    BadInput(
        "distill-inputs-on-images",
        "train.distill_inputs: token-dropout perturbs text; the data is images",
        _run_spec("perturb-images", _with(method={"name": "kd"}, old="x.pt", train__distill_inputs={"rate": 0.1})),
    ),
    BadInput("yaml-empty-file", "must be a YAML mapping", _run_text("empty", "")),
    BadInput("spec-not-utf8", "cannot read", _run_text("binary", b"model: \xff\xfe\x00corpus\n")),
    BadInput("spec-missing-file", "cannot read", lambda folder, assets: ["run", str(folder / "nowhere.yaml")]),
    BadInput("spec-is-a-directory", "cannot read", lambda folder, assets: ["run", str(folder)]),
    BadInput("spec-path-through-a-file", "cannot read (Not a directory)", _run_through_file),
    # fields: unknown keys, wrong types, ranges, combinations
    BadInput("unknown-top-level-key", "colour: unknown key", _run_spec("colour", _with(colour="red"))),
    BadInput("unknown-nested-key", "method.mm: unknown key", _run_spec("mm", _with(method__mm=3))),
    BadInput("missing-required-field", "arch: Field required", _run_spec("no-arch", _with(arch=None))),
    BadInput(
        "every-problem-at-once",
        (
            "method.m: Input should be greater than or equal to 1",
            "train.epochs: Input should be greater than or equal to 1",
            "train.lr: Input should be greater than 0",
        ),
        _run_spec("three", _with(method__m=0, train__epochs=0, train__lr=-1)),
    ),
    BadInput(
        "misspelt-key", "train.epoch: unknown key (did you mean epochs?)", _run_spec("epoch", _with(train={"epoch": 3}))
    ),
    BadInput(
        "misspelt-nested-key",
        "resources.replica.cpu: unknown key (did you mean cpus?)",
        _run_spec("cpu", _with(resources={"replica": {"cpu": 2}})),
    ),
    BadInput(
        "epochs-not-an-integer",
        "train.epochs: Input should be a valid integer",
        _run_spec("epochs", _with(train__epochs="ten")),
    ),
    BadInput("m-is-a-list", "method.m: Input should be a valid integer", _run_spec("m-list", _with(method__m=[1, 2]))),
    BadInput(
        "augment-not-a-bool",
        "train.augment: Input should be a valid boolean",
        _run_spec("augment", _with(train__augment="maybe")),
    ),
    BadInput("m-zero", "method.m: Input should be greater than or equal to 1", _run_spec("m0", _with(method__m=0))),
    BadInput(
        "m-hundred-thousand",
        "method.m: Input should be less than or equal to 64",
        _run_spec("m-huge", _with(method={"name": "elodi", "m": 100000})),
    ),
    BadInput(
        "alpha-above-one",
        "method.alpha: Input should be less than or equal to 1",
        _run_spec("alpha", _with(method__alpha=1.5)),
    ),
    BadInput("k-zero", "method.k", _run_spec("k0", _with(method__k=0))),
    BadInput("lr-negative", "train.lr: Input should be greater than 0", _run_spec("lr", _with(train__lr=-0.1))),
    BadInput("val-fraction-one", "data.val_fraction", _run_spec("val", _with(data__val_fraction=1.0))),
    BadInput(
        "negative-teacher-actors",
        "resources.teacher_actors",
        _run_spec("actors", _with(resources={"teacher_actors": -1})),
    ),
    BadInput("unknown-method", "method.name", _run_spec("method", _with(method__name="magic"))),
    BadInput(
        "unknown-architecture", "arch: unknown architecture 'resnet9000'", _run_spec("arch", _with(arch="resnet9000"))
    ),
    BadInput(
        "user-factory-without-opt-in", "needs allow_user_factories", _run_spec("factory", _with(arch="os:system"))
    ),
    BadInput("version-with-space", "version: String should match pattern", _run_spec("label", _with(version="v 2"))),
    BadInput(
        "dataset-and-path",
        "either dataset or path",
        _run_spec("both", _with(data__dataset="fashion-mnist", data__path="/tmp")),
    ),
]
