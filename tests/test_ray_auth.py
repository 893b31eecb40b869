"""A Ray cluster with token authentication, as docker-compose.yml starts one (RAY_AUTH_MODE=token and
RAY_AUTH_TOKEN on every node): its Jobs API refuses a request without the token, and `congruent
submit/status/logs/cancel` pass the token from RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH, or stop with
one line when they have none."""

import re
import secrets
import urllib.error
import urllib.request

import pytest
import yaml
from mlflow import MlflowClient

from orchestrator.cli import main
from ray_nodes import start_ray_cluster, stop_ray_cluster
from reliability_records import record


@pytest.fixture(scope="module")
def token_cluster(tmp_path_factory):
    """A one-node Ray cluster (2 CPUs) requiring a fresh token; its jobs track to a sqlite store."""
    folder = tmp_path_factory.mktemp("token_cluster")
    token = secrets.token_urlsafe(24)
    store = f"sqlite:///{folder / 'mlflow.db'}"
    node_env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token, "MLFLOW_TRACKING_URI": store}
    cluster = start_ray_cluster(cpus_per_node=2, workers=0, node_env=node_env)
    try:
        yield cluster, token, store
    finally:
        stop_ray_cluster(cluster)


def _status(url: str, token: str | None) -> int:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def test_the_job_api_refuses_a_request_without_the_token(token_cluster):
    cluster, token, _ = token_cluster
    url = f"{cluster.dashboard}/api/jobs/"
    codes = (_status(url, None), _status(url, "not-the-token"), _status(url, token))
    record("security", check="Jobs API: no token 401, a wrong one 403, the token 200", passed=codes == (401, 403, 200))
    assert codes == (401, 403, 200)


def test_job_commands_without_the_token_stop_in_one_line(token_cluster, tmp_path, monkeypatch, capsys):
    cluster, token, _ = token_cluster
    for name in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_MODE"):
        monkeypatch.delenv(name, raising=False)
    # Ray's clients let RAY_ADDRESS override the address they are given: --jobs-address must win
    monkeypatch.setenv("RAY_ADDRESS", "http://127.0.0.1:9")
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({"model": "m", "version": "v1", "arch": "mlp-small", "method": {"name": "none"}}))
    address = ["--jobs-address", cluster.dashboard]
    for command in (
        ["submit", str(spec)],
        ["status"],
        ["status", "raysubmit_x"],
        ["logs", "raysubmit_x"],
        ["cancel", "raysubmit_x"],
    ):
        assert main([*command, *address]) == 2, command
        err = capsys.readouterr().err.strip().splitlines()
        hint = "requires Ray's token: set RAY_AUTH_TOKEN (the stack's .env) or RAY_AUTH_TOKEN_PATH"
        assert err == [f"congruent {command[0]}: error: {cluster.dashboard} {hint}"]
    monkeypatch.setenv("RAY_AUTH_TOKEN", "not-the-token")
    assert main(["status", *address]) == 2
    assert "refused the token" in capsys.readouterr().err
    monkeypatch.delenv("RAY_AUTH_TOKEN")
    (tmp_path / "token").write_text(token + "\n")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "token"))
    assert main(["status", *address]) == 0
    assert "no jobs submitted" in capsys.readouterr().out


def test_a_pipeline_submitted_with_the_token_runs_and_registers(
    token_cluster, spec_document, tmp_path, monkeypatch, capsys
):
    """The job's driver joins the cluster with the node's token (the stack's nodes carry it), and
    `status` and `logs` read the job with the token from RAY_AUTH_TOKEN."""
    cluster, token, store = token_cluster
    monkeypatch.setenv("RAY_AUTH_TOKEN", token)
    monkeypatch.setenv("RAY_ADDRESS", "http://127.0.0.1:9")  # not the cluster: --jobs-address wins
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(spec_document(model="authed", version="v1", promote={"max_nfr": 1.0})))
    assert main(["submit", str(spec), "--jobs-address", cluster.dashboard, "--wait"]) == 0
    out = capsys.readouterr().out
    assert "SUCCEEDED" in out and "registry: authed version 1" in out, out[-2000:]
    job_id = re.search(r"as Ray job (\S+)", out).group(1)
    assert main(["status", job_id, "--jobs-address", cluster.dashboard]) == 0
    assert "SUCCEEDED" in capsys.readouterr().out
    assert main(["status", "--jobs-address", cluster.dashboard]) == 0
    assert job_id in capsys.readouterr().out
    assert main(["logs", job_id, "--jobs-address", cluster.dashboard]) == 0
    assert "registry: authed version 1" in capsys.readouterr().out
    versions = MlflowClient(tracking_uri=store, registry_uri=store).search_model_versions("name = 'authed'")
    assert [str(v.version) for v in versions] == ["1"]
