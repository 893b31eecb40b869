"""What `congruent run` prints: the --json result, and an embedded Ray that starts without Ray's
warnings on stderr."""

import json
import os
from pathlib import Path

from fresh_python import fresh_python
from orchestrator.commands.run import json_result
from orchestrator.driver.publish import PipelineResult

ROOT = Path(__file__).resolve().parent.parent


def test_run_json_names_the_registered_version_beside_the_metrics():
    metrics = {"error_rate": 0.12, "vs_old": {"nfr": 0.02, "pfr": 0.05, "rel_nfr": 0.9, "er_old": 0.2, "er_new": 0.12}}
    result = PipelineResult(
        "fmnist",
        "v2",
        "none",
        "mlp-small",
        "abc",
        "f00d",
        100,
        "model.pt",
        "old.pt",
        metrics,
        {},
        "labels.npy",
        run_id="0123abcd",
        registered_version="3",
    )
    printed = json.loads(json.dumps(json_result(result)))
    assert printed == {**metrics, "model": "fmnist", "version": "v2", "registered_version": "3", "run_id": "0123abcd"}


def test_the_embedded_ray_starts_without_the_token_auth_warning(tmp_path):
    """Ray warns on every start of a local cluster when RAY_AUTH_MODE is unset; the command sets the
    mode Ray would pick (token) explicitly. (The test suite sets RAY_AUTH_MODE=disabled, hence a
    process of its own, with a home of its own for the token Ray writes.)"""
    probe = (
        "import ray\nfrom orchestrator.execution.cluster import connect\nconnect(None)\n"
        "print(int(ray.cluster_resources()['CPU']))\nray.shutdown()"
    )
    done = fresh_python(probe, cwd=tmp_path, drop=("RAY_AUTH_MODE", "RAY_ADDRESS"), extra_env={"HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout.strip()) == os.cpu_count()
    assert "Token authentication" not in done.stderr and "WARNING" not in done.stderr, done.stderr
    assert (tmp_path / ".ray" / "auth_token").is_file()  # token authentication is on, as Ray's default
