"""`congruent check`: the whole preflight without Ray or training — every problem at once, one line
each, exit 2 — and a chain of specs checked in order before any of them runs."""

import os
import subprocess
import sys
from pathlib import Path

import yaml

from orchestrator.cli import main

ROOT = Path(__file__).resolve().parents[1]


def clean_env() -> dict[str, str]:
    """This environment without a tracking store or a Ray cluster: the embedded ones, in the cwd."""
    return {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "RAY_ADDRESS")}


def write(folder: Path, name: str, document: dict) -> str:
    path = folder / name
    path.write_text(yaml.safe_dump(document))
    return str(path)


def test_three_problems_of_one_spec_are_three_lines_exit_2_without_ray_or_mlflow(tmp_path):
    """The issue's case: a table without the text column, a num_classes below the largest label and
    an old reference that names nothing — three lines, exit 2, Ray and MLflow not even imported
    (their imports alone take seconds), no MLflow store or storage folder left behind."""
    (tmp_path / "intents.csv").write_text("body,label\nhello there,0\ngood day,1\nbad day,5\nnice one,2\n")
    spec = write(
        tmp_path,
        "v2.yaml",
        {
            "model": "intents",
            "version": "v2",
            "data": {"path": "intents.csv", "num_classes": 3},
            "arch": "text-bag",
            "old": "intents@champion",
            "method": {"name": "kd"},
            "storage": "runs",
        },
    )
    probe = (
        "import sys\nfrom orchestrator.cli import main\ncode = main(['check', sys.argv[1]])\n"
        "print(sorted({'ray', 'mlflow'} & set(sys.modules)))\nsys.exit(code)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, spec],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**clean_env(), "PYTHONPATH": str(ROOT)},
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 3, done.stderr
    assert all(line.startswith(f"congruent check: error: {spec}: ") for line in lines)
    assert "old: intents@champion: no version is registered yet" in lines[0]
    assert "data: " in lines[1] and "no column 'text'; the columns are 'body', 'label'" in lines[1]
    assert "label 5 is not below data.num_classes = 3" in lines[2]
    assert done.stdout.strip() == "[]"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["intents.csv", "v2.yaml"]


def test_a_chain_is_checked_in_order_before_any_version_exists(tmp_path, capsys, monkeypatch):
    """v2 names `old: MODEL@champion`, which only v1's run will register and promote: checked
    together, v2's old is checked against v1's spec (its classes, what it reads); checked alone, or
    after a v1 without a promotion gate (the champion would not move), it names nothing yet."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")  # a store no test created
    common = {"data": {"train_limit": 500, "eval_limit": 200}, "storage": str(tmp_path / "runs")}
    v1_document = {"model": "chain", "version": "v1", "arch": "mlp-small", **common}
    v1 = write(tmp_path, "v1.yaml", {**v1_document, "promote": {"max_nfr": 1.0}})
    v2 = {"model": "chain", "version": "v2", "arch": "small-cnn", "old": "chain@champion", **common}
    v2_path = write(tmp_path, "v2.yaml", {**v2, "method": {"name": "elodi", "m": 2}})
    assert main(["check", v1, v2_path]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0].startswith(f"{v1}: ok: chain v1: none, mlp-small; 500 train / 6,048 val / 200 eval image samples")
    assert out[1].startswith(f"{v2_path}: ok: chain v2: elodi (m 2), small-cnn") and "old chain@champion" in out[1]
    assert main(["check", v2_path]) == 2
    assert "chain@champion: no version is registered yet" in capsys.readouterr().err
    ungated = write(tmp_path, "ungated.yaml", v1_document)
    assert main(["check", ungated, v2_path]) == 2
    assert "chain@champion: no version is registered yet" in capsys.readouterr().err
    # the old model a bcwi version interpolates must be of its architecture: v1's is not
    bcwi = write(tmp_path, "bcwi.yaml", {**v2, "method": {"name": "bcwi"}})
    assert main(["check", v1, bcwi]) == 2
    assert "method: bcwi interpolates weights, so arch must equal the old model's ('mlp-small')" in (
        capsys.readouterr().err
    )


def test_run_check_is_check(tmp_path, capsys):
    spec = write(
        tmp_path,
        "v1.yaml",
        {"model": "m", "version": "v1", "arch": "mlp-small", "data": {"train_limit": 100000}, "storage": "runs"},
    )
    assert main(["run", spec, "--check"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("congruent run: error: ") and "train_limit 100000 is above the 53952 training samples" in err
