"""The bad-input corpus (tests/bad_inputs.py, bad_data_inputs.py, bad_text.py) through the real
command line: each case is one stderr line per problem naming it (every problem found at once),
exit code 2, no traceback, and nothing registered or tracked."""

import warnings

import pytest
from mlflow import MlflowClient

from bad_data_inputs import DATA_CASES
from bad_inputs import CASES as IMAGE_CASES
from bad_inputs import make_assets
from bad_model_inputs import MODEL_CASES
from bad_text import TEXT_CASES
from orchestrator.cli import main
from orchestrator.tracking import store
from reliability_records import record

CASES = IMAGE_CASES + MODEL_CASES + DATA_CASES + TEXT_CASES
HIDDEN_BY_DEFAULT = (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning)


@pytest.fixture(scope="module")
def corpus_store(tmp_path_factory, monkeypatch_module):
    """A sqlite MLflow store of the corpus's own, holding one prepared version (`make_assets`)."""
    folder = tmp_path_factory.mktemp("corpus")
    monkeypatch_module.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{folder / 'mlflow.db'}")
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch_module.delenv(key, raising=False)  # the corpus has no AWS credentials of any kind
    for key in ("AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE"):
        monkeypatch_module.setenv(key, str(folder / "no-aws-files"))
    monkeypatch_module.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch_module.chdir(folder)  # anything written relative to the working directory lands here
    return folder, make_assets(folder)


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def store_contents() -> tuple[list[tuple[str, str]], int]:
    """(registered model, version) pairs and the number of runs in every experiment."""
    store.configure()
    client = MlflowClient()
    versions = [(mv.name, str(mv.version)) for mv in client.search_model_versions()]
    experiments = [e.experiment_id for e in client.search_experiments()]
    return sorted(versions), len(client.search_runs(experiments)) if experiments else 0


def test_the_corpus_is_large_and_names_are_unique():
    assert len(CASES) >= 30 and len({case.name for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_bad_input_is_one_line_per_problem_exit_2_nothing_registered(case, corpus_store, tmp_path, capsys):
    _, assets = corpus_store
    before = store_contents()
    argv = case.make(tmp_path, assets)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = main(argv)
    captured = capsys.readouterr()
    # what Python would print on the command line's stderr beside the problem lines (its default
    # filters hide only these categories outside __main__)
    printed = [w for w in caught if not issubclass(w.category, HIDDEN_BY_DEFAULT)]
    lines = captured.err.strip().splitlines()
    expected = (case.expect,) if isinstance(case.expect, str) else case.expect
    found = len(lines) == len(expected) and all(fragment in line for fragment, line in zip(expected, lines))
    record(
        "bad_input",
        name=case.name,
        command=argv[0],
        exit_code=code,
        stderr=captured.err.strip(),
        rejected=code == 2 and found and "Traceback" not in captured.err,
    )
    assert code == 2, captured.err
    assert all(line.startswith(f"congruent {argv[0]}: error: ") for line in lines), captured.err
    assert found, captured.err
    assert printed == [], [f"{w.category.__name__}: {w.message}" for w in printed]
    assert "Traceback" not in captured.err + captured.out
    assert store_contents() == before  # no run started, no version registered


def test_check_and_run_find_the_same_problems_in_the_same_words(corpus_store, tmp_path, capsys):
    """Every case of the corpus that `congruent run` refuses (but for its `--out`, which `check` has
    not) is refused by `congruent check` of the same spec with the same lines: one list of checks."""
    _, assets = corpus_store
    compared, differ = 0, []
    for case in CASES:
        folder = tmp_path / case.name
        folder.mkdir()
        argv = case.make(folder, assets)
        if argv[0] != "run" or "--out" in argv:
            continue
        found = {}
        for command in ("run", "check"):
            code = main([command, argv[1]])
            err = capsys.readouterr().err.strip().splitlines()
            found[command] = (code, [line.removeprefix(f"congruent {command}: error: ") for line in err])
        compared += 1
        if found["run"] != found["check"]:
            differ.append(f"{case.name}: run {found['run']} / check {found['check']}")
    assert compared >= 30, compared
    assert not differ, "\n".join(differ)
