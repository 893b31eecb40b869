"""The front door (orchestrator/driver/launch.py): `run`, `tune`, `demo` and `submit` check their
inputs the same way before any work, and each says every problem at once, one line each, exit 2, in
the same words."""

from pathlib import Path

import pytest
import yaml

from fresh_python import fresh_python
from orchestrator.cli import main


def two_problem_spec(folder: Path) -> str:
    """A spec whose old checkpoint does not exist, with a tune section (so `tune` takes it too)."""
    path = folder / "v2.yaml"
    document = {
        "model": "door",
        "version": "v2",
        "arch": "mlp-small",
        "data": {"train_limit": 200, "eval_limit": 100},
        "old": str(folder / "nowhere.pt"),
        "method": {"name": "elodi", "m": 2},
        "tune": {"search": "grid", "space": {"alpha": [0.5, 0.9]}},
        "storage": str(folder / "storage"),
    }
    path.write_text(yaml.safe_dump(document))
    return str(path)


def unwritable(folder: Path) -> str:
    """An output folder no one, root included, can create: its parent is a regular file."""
    (folder / "plain.txt").write_text("x")
    return str(folder / "plain.txt" / "out")


@pytest.mark.parametrize("command", ["run", "tune"])
def test_a_spec_with_two_problems_is_two_lines_exit_2(command, tmp_path, capsys):
    spec, out = two_problem_spec(tmp_path), unwritable(tmp_path)
    code = main([command, spec, "--out", out])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert lines == [
        f"congruent {command}: error: {spec}: old: {tmp_path / 'nowhere.pt'}: no such checkpoint",
        f"congruent {command}: error: --out: {out}: cannot write there (Not a directory)",
    ]


def test_tune_adds_a_missing_tune_section_to_the_other_problems(tmp_path, capsys):
    spec = two_problem_spec(tmp_path)
    document = yaml.safe_load(Path(spec).read_text())
    del document["tune"]
    Path(spec).write_text(yaml.safe_dump(document))
    code = main(["tune", spec, "--out", unwritable(tmp_path)])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 3
    assert lines[0] == (
        f"congruent tune: error: {spec}: tune: the spec has no tune section (search space, search, num_samples)"
    )


def test_the_demo_says_every_problem_of_its_options_at_once(tmp_path, capsys):
    """The demo's input is its options: an output folder that cannot be written and two settings
    out of range (v2's replicas and λ) are three lines, before Ray starts."""
    out = unwritable(tmp_path)
    code = main(["demo", "--out", out, "--m", "0", "--legacy-weight", "5"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert lines == [
        f"congruent demo: error: --out: {out}: cannot write there (Not a directory)",
        "congruent demo: error: method.m: Input should be greater than or equal to 1",
        "congruent demo: error: method.legacy_weight: Input should be less than or equal to 1",
    ]


def test_the_demo_checks_v2_against_the_version_v1_will_register(tmp_path):
    """v2's checks run before v1 exists: its old model is what v1 registers, so with the data both
    specs pass, and a Fashion-MNIST folder that is missing is one line (v2 is checked once v1 passes), in
    a process of its own (this one holds the splits it has read)."""
    from orchestrator.driver.demo import demo_settings
    from orchestrator.driver.launch import demo_problems

    settings = demo_settings(tmp_path, False, model=None, epochs=None, m=4, seed=0, train_limit=None, eval_limit=None)
    assert demo_problems(settings) == []
    code = "import sys\nfrom orchestrator.cli import main\nsys.exit(main(['demo', '--out', sys.argv[1]]))"
    done = fresh_python(code, str(tmp_path), extra_env={"CONGRUENT_FASHION_MNIST_DIR": str(tmp_path / "missing")})
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "missing" in lines[0], done.stderr


def test_a_failed_stage_is_one_line_exit_1_and_a_cluster_that_fails_to_start_is_not_one(monkeypatch, capsys, tmp_path):
    """A stage's failure is named by its cause (a RayTaskError's worker exception), first line only;
    Ray failing to start before any stage ran is not reported as a failed pipeline."""
    from types import SimpleNamespace

    from orchestrator.driver import launch

    plan = SimpleNamespace(data_parallel=False, spec=SimpleNamespace(version="v2"))
    monkeypatch.setattr(launch, "prepare", lambda *args, **kwargs: launch.Prepared(plan, tmp_path, None))  # type: ignore[arg-type]
    monkeypatch.setattr("orchestrator.execution.cluster.connect", lambda *args, **kwargs: None)

    def failing(plan, run_dir, watch):
        error = RuntimeError("ray: task failed")
        error.cause = ValueError("bad batch\nat step 3")  # type: ignore[attr-defined]  # as a RayTaskError carries it
        raise error

    monkeypatch.setattr("orchestrator.driver.pipeline.run_pipeline", failing)
    assert main(["run", "spec.yaml", "--quiet"]) == 1
    assert capsys.readouterr().err == (
        "congruent run: error: spec.yaml: pipeline failed (ValueError: bad batch); the MLflow run is marked "
        "FAILED with the traceback in error.log, no version was registered\n"
    )

    def refused(*args, **kwargs):
        raise ConnectionError("no cluster")

    monkeypatch.setattr("orchestrator.execution.cluster.connect", refused)
    with pytest.raises(ConnectionError):
        main(["run", "spec.yaml", "--quiet"])


def test_submit_says_every_problem_of_its_spec_before_reaching_the_cluster(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text(
        yaml.safe_dump({"model": "door", "version": "v2", "arch": "mlp-small", "train": {"epochs": 0, "lr": -1}})
    )
    code = main(["submit", str(path), "--jobs-address", "http://127.0.0.1:1"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 2, lines
    assert "train.epochs" in lines[0] and "train.lr" in lines[1]
    assert all(line.startswith(f"congruent submit: error: {path}: ") for line in lines)
