"""The bad-input corpus, continued (tests/bad_inputs.py holds the cases' helpers and the spec's
cases, tests/bad_model_inputs.py the old version's and init's): malformed data, places a run cannot
write to, prediction files and registry references, each a real `congruent` command line that must
fail with one line naming the problem and exit code 2."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

import bad_files
from bad_inputs import BASE, Assets, BadInput, _data, _run_spec, _run_with, _through_a_file, _with


def _compare(labels: np.ndarray | Callable[[Path], str], *predictions: np.ndarray | bytes | None):
    """`congruent compare` over arrays written as .npy (bytes: raw file content; None: no file)."""

    def make(folder: Path, assets: Assets) -> list[str]:
        paths = []
        for i, value in enumerate((labels, *predictions)):
            path = folder / f"array-{i}.npy"
            if isinstance(value, bytes):
                path.write_bytes(value)
            elif isinstance(value, np.ndarray):
                np.save(path, value, allow_pickle=value.dtype == object)
            paths.append(str(path))
        return ["compare", "--labels", paths[0], *paths[1:]]

    return make


LABELS = np.array([0, 1, 2, 1, 0])
LOGITS = np.eye(3, dtype=np.float32)[LABELS]


def _with_value(value: float) -> np.ndarray:
    logits = LOGITS.copy()
    logits[2, 1] = value
    return logits


DATA_CASES = [
    # data
    BadInput(
        "train-limit-one",
        "the train split holds 1 of the 10 classes (none of 0, 1, 3, 4, 5, …); train_limit 1 is too small",
        _run_spec("one", _with(data__train_limit=1)),
    ),
    BadInput(
        "train-limit-half-classes",
        "the train split holds 2 of the 5 classes of the first half (none of 1, 3, 4)",
        _run_spec("half", _with(data={"subset": "half-classes", "train_limit": 3})),
    ),
    BadInput(
        "train-limit-above-the-split",
        "data: fashion-mnist: train_limit 60000 is above the 53952 training samples",
        _run_spec("train-above", _with(data__train_limit=60000)),
    ),
    BadInput(
        "eval-limit-above-the-split",
        "data: fashion-mnist: eval_limit 20000 is above the 10000 regression-eval samples",
        _run_spec("eval-above", _with(data__eval_limit=20000)),
    ),
    BadInput(
        "data-empty-directory", "not a usable ImageFolder tree", _run_spec("empty-dir", _data(bad_files.empty_dir))
    ),
    BadInput(
        "data-missing-path",
        "no such file or directory",
        _run_spec("no-data", lambda folder, a: _with(data={"path": str(folder / "no-data")})),
    ),
    BadInput("data-broken-symlink", "no such file or directory", _run_spec("link", _data(bad_files.broken_link))),
    BadInput(
        "data-path-through-a-file",
        "plain.txt/data.npz: no such file or directory",
        _run_spec("through", _data(lambda folder: bad_files.text_file("plain.txt", "x")(folder) / "data.npz")),
    ),
    BadInput("data-not-npz", "must be an .npz", _run_spec("txt", _data(bad_files.text_file("data.txt", "1,2,3\n")))),
    BadInput(
        "data-npz-garbage",
        "not an .npz archive",
        _run_spec("garbage", _data(bad_files.text_file("data.npz", "not a zip"))),
    ),
    BadInput(
        "data-npz-without-y",
        "must hold arrays 'x' and 'y'",
        _run_spec("no-y", _data(bad_files.npz("no-y.npz", x=np.zeros((4, 1, 8, 8), np.uint8)))),
    ),
    BadInput(
        "data-npz-nan-pixels",
        "must be finite",
        _run_spec(
            "nan-x", _data(bad_files.npz("nan.npz", x=np.full((4, 1, 8, 8), np.nan, np.float32), y=np.arange(4)))
        ),
    ),
    BadInput(
        "data-corrupt-jpg",
        "images/coat/0.jpg: cannot read image (not a format PIL can identify)",
        _run_spec(
            "corrupt-jpg",
            _data(
                bad_files.image_tree(
                    ("coat/0.jpg", b"\xff\xd8 not really a jpeg"), ("coat/1.png", None), ("shirt/0.png", None)
                )
            ),
        ),
    ),
    BadInput(
        "data-truncated-png",
        "images/shirt/1.png: cannot read image (image file is truncated",
        _run_spec(
            "truncated-png",
            _data(
                bad_files.image_tree(
                    ("coat/0.png", None), ("shirt/0.png", None), ("shirt/1.png", bad_files.half_a_png())
                )
            ),
        ),
    ),
    BadInput(
        "data-idx-label-gaps",
        "idx/train-labels-idx1-ubyte: class ids must run 0..C−1 without gaps, but the "
        "labels reach 200 and 189 ids below it never occur (10, 11, 12, 13, 14, …)",
        _run_spec("idx-gaps", _data(bad_files.idx_with_labels(bad_files.DIGITS_WITH_STRAYS))),
    ),
    BadInput(
        "data-npz-label-gaps",
        "the labels reach 7 and 2 ids below it never occur (3, 5)",
        _run_spec(
            "npz-gaps",
            _data(
                bad_files.npz(
                    "gaps.npz", x=np.zeros((40, 28, 28), np.uint8), y=np.array([0, 1, 2, 4, 6, 7] * 6 + [0, 1, 2, 4])
                )
            ),
        ),
    ),
    BadInput(
        "data-label-above-num-classes",
        "label 200 is not below data.num_classes = 18",
        _run_spec(
            "declared",
            lambda folder, a: _with(
                data={"path": str(bad_files.idx_with_labels(bad_files.DIGITS_WITH_STRAYS)(folder)), "num_classes": 18}
            ),
        ),
    ),
    BadInput(
        "num-classes-for-fashion-mnist",
        "data: num_classes declares the class count of a `path` dataset",
        _run_spec("fmnist-classes", _with(data__num_classes=12)),
    ),
    BadInput(
        "data-npz-pickled-labels",
        "cannot read .npz",
        _run_spec(
            "obj-y",
            _data(
                bad_files.npz("obj.npz", x=np.zeros((2, 1, 8, 8), np.uint8), y=np.array([{"a": 1}, None], dtype=object))
            ),
        ),
    ),
    # where the run writes, and what the cluster can hold: refused before Ray starts
    BadInput(
        "storage-unwritable",
        "plain.txt/runs: cannot write there (Not a directory)",
        _run_with("storage", BASE, lambda f: str(_through_a_file(f) / "runs")),
    ),
    BadInput(
        "out-unwritable",
        "plain.txt/out: cannot write there (Not a directory)",
        _run_with("out", BASE, out=lambda f: str(_through_a_file(f) / "out")),
    ),
    BadInput(
        "storage-s3-without-credentials",
        "storage: s3://congruent-runs/corpus: no AWS credentials",
        _run_with("s3", BASE, lambda f: "s3://congruent-runs/corpus"),
    ),
    BadInput(
        "resources-beyond-the-cluster",
        "resources.replica: asks 100000.0 CPU",
        _run_spec("cpus", _with(method={"name": "ensemble", "m": 2}, resources={"replica": {"cpus": 100000}})),
    ),
    BadInput(
        "replica-workers-beyond-the-cluster",
        "resources.replica: asks 64 workers × 1.0 CPU",
        _run_spec("workers", _with(method={"name": "ensemble", "m": 2}, resources={"replica": {"workers": 64}})),
    ),
    BadInput(
        "student-workers-beyond-the-cluster",
        "resources: 2 student workers need 3.0 CPU",
        _run_spec("student-workers", _with(resources={"student": {"cpus": 1.5, "workers": 2}})),
    ),
    BadInput(
        "pack-and-workers",
        "pack and workers",
        _run_spec("pack-workers", _with(resources={"replica": {"pack": 2, "workers": 2}})),
    ),
    BadInput(
        "resources-teacher-pool-beyond-the-cluster",
        "resources: student + 2 teacher actors need",
        _run_spec(
            "pool",
            lambda folder, a: _with(method__name="fd-lm", old=a.old_checkpoint, resources={"teacher": {"cpus": 50000}}),
        ),
    ),
    # prediction files
    BadInput("predictions-nan", "NaN", _compare(LABELS, LOGITS, _with_value(np.nan))),
    BadInput("predictions-inf", "Inf", _compare(LABELS, LOGITS, _with_value(np.inf))),
    BadInput(
        "predictions-pickled",
        "pickled Python objects",
        _compare(LABELS, LOGITS, np.array([{"class": 1}] * 5, dtype=object)),
    ),
    BadInput("predictions-length-mismatch", "5", _compare(LABELS, LOGITS, LOGITS[:4])),
    BadInput("predictions-empty-file", "not a .npy file", _compare(LABELS, LOGITS, b"")),
    BadInput("predictions-missing-file", "no such file", _compare(LABELS, LOGITS, None)),
    BadInput("labels-2d", "labels must be a 1-D array", _compare(LOGITS.astype(np.int64), LOGITS, LOGITS)),
    BadInput("labels-negative", "negative class ids", _compare(LABELS - 1, LOGITS, LOGITS)),
    BadInput(
        "logits-fewer-columns-than-classes",
        "logits have 3 columns, but the labels reach class 9: a model of these labels has at least 10",
        _compare(np.array([0, 1, 2, 9, 0]), LOGITS, LOGITS),
    ),
    # the registry
    BadInput(
        "promote-unknown-model",
        "corpus-nothing",
        lambda folder, a: ["promote", "corpus-nothing", "1", "--max-nfr", "0.1"],
    ),
    BadInput(
        "promote-max-nfr-as-a-percentage",
        "--max-nfr: must be a fraction in [0, 1] (0.05 = 5%), got 5",
        lambda folder, a: ["promote", "corpus-parent", "1", "--max-nfr", "5"],
    ),
    BadInput(
        "promote-max-nfr-negative",
        "--max-nfr: must be a fraction in [0, 1] (0.05 = 5%), got -0.1",
        lambda folder, a: ["promote", "corpus-parent", "1", "--max-nfr", "-0.1"],
    ),
    BadInput(
        "promote-max-er-increase-above-one",
        "--max-er-increase: must be a fraction in [-1, 1] (0.05 = 5%), got 3",
        lambda folder, a: ["promote", "corpus-parent", "1", "--max-nfr", "0.02", "--max-er-increase", "3"],
    ),
    BadInput(
        "report-unknown-version",
        "corpus-parent has no version 9; its versions: 1, 2, 3",
        lambda folder, a: ["report", "corpus-parent", "--version", "9", "--out", str(folder / "r.html")],
    ),
    BadInput(
        "versions-unknown-model",
        "no registered model 'corpus-nothing'",
        lambda folder, a: ["versions", "corpus-nothing"],
    ),
]
