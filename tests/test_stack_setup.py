"""The stack's setup steps (infra/stack_setup.py): no placeholder secret starts the stack or the tests'
native topology, and the pipelines run as an MLflow user that is not admin."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from orchestrator.cli import main
from reliability_records import record
from servers import start_mlflow_server, start_seaweedfs
from services import pointed_at
from stack_secrets import stack_setup

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "infra" / "stack_setup.py"
SECRET_WORDS = ("PASSWORD", "SECRET", "TOKEN")


def _env_file(text: str) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in text.splitlines() if "=" in line and not line.lstrip().startswith("#"))
    return {name.strip(): value.strip() for name, value in pairs}


def _compose_secrets() -> tuple[list[str], set[str]]:
    """(the variables check-secrets is given, every .env variable a service takes as a secret)."""
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    handed_out = set()
    for service in services.values():
        for key, value in (service.get("environment") or {}).items():
            if any(word in key for word in SECRET_WORDS):
                handed_out |= set(re.findall(r"\$\{(\w+)\}", str(value)))
    return services["check-secrets"]["command"], handed_out


def test_a_secret_must_be_set_long_quotable_and_not_a_placeholder():
    module = stack_setup()
    assert module.secret_problem("S", None) == "S is not set"
    assert "placeholder" in module.secret_problem("S", "change-me-postgres")
    assert "placeholder" in module.secret_problem("S", "xx-CHANGE-ME-xxxxxxxxxx")
    assert module.secret_problem("S", "a" * 15) == "S has 15 characters: use at least 16"
    assert "only letters" in module.secret_problem("S", 'abcdefghijklmnop"')
    assert "only letters" in module.secret_problem("S", "abcdefgh ijklmnop")
    assert module.secret_problem("S", "a" * 16) is None
    assert module.secret_problem("S", "Zm9v+YmFy/YmF6=_.-0123") is None


def test_check_secrets_covers_every_secret_the_compose_file_hands_out():
    checked, handed_out = _compose_secrets()
    assert set(checked) == handed_out - {"POSTGRES_USER", "POSTGRES_DB"}
    assert len(checked) == 12


def test_env_example_as_it_is_is_refused_with_one_line_per_placeholder():
    checked, _ = _compose_secrets()
    example = _env_file((ROOT / ".env.example").read_text())
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "check-secrets", *checked],
        env={"PATH": os.environ["PATH"], **example},
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = done.stderr.strip().splitlines()
    named = len(lines) == len(checked) == 12 and all("placeholder of .env.example" in line for line in lines)
    refused = done.returncode == 2 and named
    record("security", check=".env.example's change-me secrets refused before anything starts", passed=refused)
    assert refused, done.stderr


def test_new_env_replaces_every_placeholder_with_a_secret_that_passes():
    checked, _ = _compose_secrets()
    template = (ROOT / ".env.example").read_text()
    made = _env_file(stack_setup().new_env(template))
    assert "change-me" not in "".join(made.values())
    assert set(made) == set(_env_file(template))
    assert stack_setup().check_secrets(checked, made) == []
    assert made["PUBLISH_HOST"] == "127.0.0.1"
    again = _env_file(stack_setup().new_env(template))
    assert all(again[name] != made[name] for name in checked)  # fresh each time


def test_a_fresh_env_has_three_distinct_serving_tokens_and_equal_ones_are_refused():
    """new-env gives the predict, feedback and control tokens values of their own; check-secrets
    refuses a feedback token that is the serve token (the fallback that let predicting clients label)."""
    checked, _ = _compose_secrets()
    made = _env_file(stack_setup().new_env((ROOT / ".env.example").read_text()))
    tokens = [made[name] for name in ("SERVE_TOKEN", "FEEDBACK_TOKEN", "CONTROL_TOKEN")]
    assert all(tokens) and len(set(tokens)) == 3
    shared = {**made, "FEEDBACK_TOKEN": made["SERVE_TOKEN"]}
    assert stack_setup().check_secrets(checked, shared) == [
        "FEEDBACK_TOKEN is the same as SERVE_TOKEN: each secret must be its own"
    ]
    assert stack_setup().check_secrets(checked, {**made, "CONTROL_TOKEN": ""}) == ["CONTROL_TOKEN is not set"]
    record("serving_security", check="a fresh .env (stack_setup.py new-env) has three distinct serving tokens; "
           "check-secrets refuses an empty one or two equal ones", passed=True)  # fmt: skip


def test_the_native_topology_refuses_a_placeholder_secret(tmp_path):
    with pytest.raises(ValueError, match="AWS_SECRET_ACCESS_KEY is still the placeholder"):
        start_seaweedfs(tmp_path / "s3", "congruent", "change-me-too-but-longer")
    assert not (tmp_path / "s3").exists()  # nothing was started


def test_a_pipeline_runs_as_the_non_admin_user_pipeline_user_makes(
    ray_cluster, spec_file, tmp_path, monkeypatch, capsys
):
    """The stack's pipeline-user step (in its accounts job) against MLflow's basic auth, then a whole
    `congruent run` as that user: it creates its experiment, registers and promotes its version; it
    cannot touch a model the admin made, and a second pipeline-user resets its password."""
    admin = ("admin", "admin-" + os.urandom(12).hex())
    server = start_mlflow_server(
        tmp_path / "mlflow", f"sqlite:///{tmp_path / 'mlflow.db'}", str(tmp_path / "artifacts"), {}, admin=admin
    )
    try:
        setup_env = {
            "PATH": os.environ["PATH"],
            "MLFLOW_TRACKING_URI": server.uri,
            "MLFLOW_ADMIN_USERNAME": admin[0],
            "MLFLOW_ADMIN_PASSWORD": admin[1],
            "MLFLOW_PIPELINE_USERNAME": "congruent",
            "MLFLOW_PIPELINE_PASSWORD": "pipeline-" + os.urandom(12).hex(),
        }

        def pipeline_user() -> str:
            done = subprocess.run(
                [sys.executable, str(SCRIPT), "pipeline-user"],
                env=setup_env,
                capture_output=True,
                text=True,
                timeout=180,
            )
            assert done.returncode == 0, done.stderr
            return done.stdout

        assert "created MLflow user congruent (not admin)" in pipeline_user()
        monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", admin[0])
        monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", admin[1])
        with pointed_at(server.uri, monkeypatch):
            MlflowClient().create_registered_model("admins-model")
            monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "congruent")
            monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", setup_env["MLFLOW_PIPELINE_PASSWORD"])
            spec = spec_file("spec", model="non-admin", version="v1", promote={"max_nfr": 1.0})
            assert main(["run", str(spec), "--ray-address", ray_cluster.address, "--out", str(tmp_path / "out")]) == 0
            assert "registry: non-admin version 1" in capsys.readouterr().out
            client = MlflowClient()
            assert client.get_registered_model("non-admin").aliases["champion"] == "1"
            with pytest.raises(MlflowException, match="Permission denied"):
                client.delete_registered_model("admins-model")
            record(
                "security",
                check="pipelines run as a non-admin MLflow user; it cannot delete another's model",
                passed=True,
            )

            setup_env["MLFLOW_PIPELINE_PASSWORD"] = "pipeline-" + os.urandom(12).hex()
            assert "password is reset and it is not admin" in pipeline_user()
            with pytest.raises(MlflowException):
                client.get_registered_model("non-admin")  # the old password no longer logs in
            monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", setup_env["MLFLOW_PIPELINE_PASSWORD"])
            assert client.get_registered_model("non-admin").name == "non-admin"
    finally:
        server.stop()


def test_the_lock_role_takes_advisory_locks_and_reads_no_mlflow_table(mlflow_stack):
    """lock-role on the tests' PostgreSQL (MLflow's store): the role logs in, takes an advisory lock,
    is refused MLflow's tables, and has no other attribute; a second run updates it."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    server = conninfo_to_dict(mlflow_stack.postgres_dsn)
    env = {
        "PATH": os.environ["PATH"],
        "POSTGRES_HOST": str(server["host"]),
        "POSTGRES_PORT": str(server["port"]),
        "POSTGRES_USER": str(server["user"]),
        "POSTGRES_DB": str(server["dbname"]),
        "POSTGRES_LOCK_USERNAME": "congruent_locks",
        "POSTGRES_LOCK_PASSWORD": "locks-" + os.urandom(12).hex(),
    }
    outputs = []
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, str(SCRIPT), "lock-role"], env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout)
    assert "role congruent_locks created" in outputs[0] and "role congruent_locks updated" in outputs[1]
    as_role = {**server, "user": "congruent_locks", "password": env["POSTGRES_LOCK_PASSWORD"]}
    with psycopg.connect(**as_role, autocommit=True) as connection:
        assert connection.execute("SELECT pg_try_advisory_lock(42)").fetchone()[0] is True
        attributes = connection.execute(
            "SELECT rolsuper, rolcreatedb, rolcreaterole, rolreplication FROM pg_roles WHERE rolname = current_user"
        ).fetchone()
        assert attributes == (False, False, False, False)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            connection.execute("SELECT count(*) FROM registered_models")
    record("security", check="the lock role takes advisory locks and is refused MLflow's tables", passed=True)
