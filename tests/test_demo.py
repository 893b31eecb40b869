"""`congruent demo` end to end on a small slice: it trains, saves, and its table matches compare."""

import json

import numpy as np

from orchestrator.cli import main


def test_demo_runs_and_its_files_feed_compare(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--epochs", "1", "--train-limit", "2000", "--eval-limit", "500"]) == 0
    printed = capsys.readouterr().out
    assert "NFR matrix" in printed and "v2-fd-lm" in printed
    files = [str(out / f"{name}.npy") for name in ("v1-old", "v2-none", "v2-fd-lm")]
    assert all(np.load(f).shape == (500, 10) for f in files)
    assert main(["compare", "--labels", str(out / "labels.npy"), *files, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["n"] == 500 and len(result["nfr_matrix"]) == 3
    assert f"{100 * result['pairs'][0]['nfr']:.2f}%" in printed
