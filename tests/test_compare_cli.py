"""Tests of `congruent compare`, run in-process through orchestrator.cli.main and end to end."""

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from orchestrator.cli import main

REPO_ROOT = Path(__file__).resolve().parents[1]

# Hand-computed case, five samples:
#   labels   0 1 2 1 0
#   a (ids)  0 1 1 1 2   correct ✓ ✓ ✗ ✓ ✗   ER = 0.4
#   b (logits → 0 2 2 1 0; the last row ties 0 and 1 → 0)
#                        correct ✓ ✗ ✓ ✓ ✓   ER = 0.2
#   c (ids)  1 1 2 0 0   correct ✗ ✓ ✓ ✗ ✓   ER = 0.4
# a→b: NFR 1/5 (sample 1), PFR 2/5 (samples 2, 4), Rel-NFR 0.2 / (0.6 · 0.2) = 5/3
# b→c: NFR 2/5 (samples 0, 3), PFR 1/5 (sample 1), Rel-NFR 0.4 / (0.8 · 0.4) = 5/4
# NFR matrix (row old, column new):
#   b→a 2/5 (2, 4), c→a 2/5 (2, 4), a→c 2/5 (0, 3), c→b 1/5 (1)
LABELS = np.array([0, 1, 2, 1, 0])
A_IDS = np.array([0, 1, 1, 1, 2])
B_LOGITS = np.array([[2.0, 0.0, 1.0], [0.0, 1.0, 3.0], [0.5, 0.1, 0.9], [0.0, 5.0, 1.0], [3.0, 3.0, 1.0]])
C_IDS = np.array([1, 1, 2, 0, 0])
EXPECTED = {
    "n": 5,
    "error_rate": [0.4, 0.2, 0.4],
    "pairs": [
        {"old": 0, "new": 1, "nfr": 0.2, "pfr": 0.4, "rel_nfr": 5 / 3},
        {"old": 1, "new": 2, "nfr": 0.4, "pfr": 0.2, "rel_nfr": 5 / 4},
    ],
    "nfr_matrix": [[0.0, 0.2, 0.4], [0.4, 0.0, 0.4], [0.4, 0.2, 0.0]],
}


def save(directory: Path, name: str, array: np.ndarray, **kwargs) -> str:
    path = directory / name
    np.save(path, array, **kwargs)
    return str(path)


@pytest.fixture
def files(tmp_path):
    """Paths of the hand-computed case: labels, a (ids), b (logits), c (ids)."""
    return {
        "labels": save(tmp_path, "labels.npy", LABELS),
        "a": save(tmp_path, "a.npy", A_IDS),
        "b": save(tmp_path, "b.npy", B_LOGITS),
        "c": save(tmp_path, "c.npy", C_IDS),
    }


def test_json_output_structure_and_values(files, capsys):
    argv = ["compare", "--labels", files["labels"], files["a"], files["b"], files["c"], "--json"]
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 0
    assert captured.err == ""
    result = json.loads(captured.out)
    assert list(result) == ["n", "error_rate", "pairs", "nfr_matrix"]
    assert [list(pair) for pair in result["pairs"]] == [["old", "new", "nfr", "pfr", "rel_nfr"]] * 2
    assert result["n"] == EXPECTED["n"]
    assert result["error_rate"] == pytest.approx(EXPECTED["error_rate"])
    for pair, expected in zip(result["pairs"], EXPECTED["pairs"], strict=True):
        assert pair == pytest.approx(expected)
    np.testing.assert_allclose(result["nfr_matrix"], EXPECTED["nfr_matrix"])


def test_json_null_for_undefined_rel_nfr(tmp_path, capsys):
    labels = save(tmp_path, "labels.npy", np.array([0, 1]))
    perfect = save(tmp_path, "perfect.npy", np.array([0, 1]))
    code = main(["compare", "--json", "--labels", labels, perfect, perfect])
    assert code == 0
    assert json.loads(capsys.readouterr().out)["pairs"][0]["rel_nfr"] is None


def test_text_output(files, capsys):
    code = main(["compare", "--labels", files["labels"], files["a"], files["b"], files["c"]])
    captured = capsys.readouterr()
    assert code == 0
    assert captured.err == ""
    out = captured.out
    for expected in ("5 samples", "a.npy", "b.npy", "c.npy", "40.00%", "166.67%", "125.00%"):
        assert expected in out
    matrix_rows = out.split("NFR matrix")[1].splitlines()[3:]  # past the title, the header and its rule
    assert [row.split()[1:] for row in matrix_rows] == [
        ["0.00%", "20.00%", "40.00%"],
        ["40.00%", "0.00%", "40.00%"],
        ["40.00%", "20.00%", "0.00%"],
    ]


def test_text_output_says_undefined(tmp_path, capsys):
    labels = save(tmp_path, "labels.npy", np.array([0, 1]))
    perfect = save(tmp_path, "perfect.npy", np.array([0, 1]))
    assert main(["compare", "--labels", labels, perfect, perfect]) == 0
    assert "undefined" in capsys.readouterr().out


def write_bytes(directory: Path, name: str, data: bytes) -> str:
    path = directory / name
    path.write_bytes(data)
    return str(path)


def save_npz(directory: Path, name: str, array: np.ndarray) -> str:
    path = directory / name
    np.savez(path, x=array)
    return str(path)


def npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


BAD_PREDICTIONS = {
    "missing file": lambda d: str(d / "missing.npy"),
    "pickled object array": lambda d: save(d, "objects.npy", np.array([{"x": 1}] * 5, dtype=object), allow_pickle=True),
    "float 1-D": lambda d: save(d, "floats.npy", np.array([0.0, 1.0, 2.0, 1.0, 0.0])),
    "3-D array": lambda d: save(d, "cube.npy", np.zeros((5, 3, 2))),
    "NaN logits": lambda d: save(d, "nan.npy", np.where(np.eye(5, 3) > 0, np.nan, 0.0)),
    "Inf logits": lambda d: save(d, "inf.npy", np.full((5, 3), np.inf)),
    "mismatched length": lambda d: save(d, "short.npy", np.array([0, 1, 2, 1])),
    "negative ids": lambda d: save(d, "negative.npy", np.array([0, -1, 2, 1, 0])),
    "garbage bytes": lambda d: write_bytes(d, "garbage.npy", b"this is not numpy\n\x00\x01"),
    "npz archive": lambda d: save_npz(d, "archive.npz", A_IDS),
    "truncated npy": lambda d: write_bytes(d, "truncated.npy", npy_bytes(np.arange(1000))[:200]),
}


def assert_one_line_error(capsys, code: int, path: str) -> None:
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith(f"congruent compare: error: {path}: ")
    assert os.path.basename(path) in lines[0]
    assert "Traceback" not in captured.err


@pytest.mark.parametrize("make_bad", BAD_PREDICTIONS.values(), ids=BAD_PREDICTIONS.keys())
def test_bad_prediction_file(make_bad, files, tmp_path, capsys):
    bad = make_bad(tmp_path)
    code = main(["compare", "--labels", files["labels"], files["a"], bad])
    assert_one_line_error(capsys, code, bad)


def test_read_error_is_one_line(files, monkeypatch, capsys):
    def failing_load(path, allow_pickle):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr("orchestrator.driver.compare.np.load", failing_load)
    code = main(["compare", "--labels", files["labels"], files["a"], files["b"]])
    assert_one_line_error(capsys, code, files["labels"])


BAD_LABELS = {
    "bool labels": lambda d: save(d, "bool_labels.npy", np.array([True, False, True, True, False])),
    "float labels": lambda d: save(d, "float_labels.npy", LABELS.astype(float)),
    "negative labels": lambda d: save(d, "neg_labels.npy", np.array([0, 1, -2, 1, 0])),
    "2-D labels": lambda d: save(d, "matrix_labels.npy", LABELS.reshape(5, 1)),
    "empty labels": lambda d: save(d, "empty_labels.npy", np.array([], dtype=np.int64)),
}


@pytest.mark.parametrize("make_bad", BAD_LABELS.values(), ids=BAD_LABELS.keys())
def test_bad_labels_file(make_bad, files, tmp_path, capsys):
    bad = make_bad(tmp_path)
    code = main(["compare", "--labels", bad, files["a"], files["c"]])
    assert_one_line_error(capsys, code, bad)


def test_single_prediction_file_is_an_error(files, capsys):
    code = main(["compare", "--labels", files["labels"], files["a"]])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.err.splitlines() == ["congruent compare: error: needs at least two prediction files (old and new)"]


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["nonsense"],
        ["compare", "a.npy", "b.npy"],
        ["compare", "--labels", "y.npy", "a.npy", "--bogus"],
    ],
    ids=["no command", "unknown command", "missing --labels", "unknown option"],
)
def test_usage_errors_are_short(argv, capsys):
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 2
    lines = captured.err.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("congruent") and ": error: " in lines[0] and lines[0].endswith("--help)")


def run_module(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=120,
    )


def test_end_to_end_exit_codes(files, tmp_path):
    ok = run_module("compare", "--json", "--labels", files["labels"], files["a"], files["b"])
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["n"] == 5

    bad = save(tmp_path, "objects.npy", np.array([None] * 5, dtype=object), allow_pickle=True)
    failed = run_module("compare", "--labels", files["labels"], files["a"], bad)
    assert failed.returncode == 2
    assert "Traceback" not in failed.stderr
    assert failed.stderr.splitlines() == [
        f"congruent compare: error: {bad}: holds pickled Python objects; save a numeric array"
    ]
