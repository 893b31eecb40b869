"""The `mlflow_stack` fixture is real: an mlflow server backed by PostgreSQL, artifacts in SeaweedFS."""

import mlflow
import psycopg
from mlflow import MlflowClient

from services import pointed_at


def test_mlflow_stack_is_real(mlflow_stack, monkeypatch, tmp_path):
    stack = mlflow_stack
    for key, value in stack.env.items():
        monkeypatch.setenv(key, value)
    assert stack.tracking_uri.startswith("http://127.0.0.1:")
    assert stack.postgres_uri.startswith("postgresql+psycopg://")

    with pointed_at(stack.tracking_uri, monkeypatch):
        experiment_id = mlflow.create_experiment("svc-check")
        with mlflow.start_run(experiment_id=experiment_id) as run:
            run_id = run.info.run_id
            mlflow.log_param("alpha", "0.5")
            mlflow.log_metric("loss", 0.25, step=1)
            mlflow.log_text("hello from the stack\n", "notes/hello.txt")
            model_dir = tmp_path / "model"
            model_dir.mkdir()
            (model_dir / "weights.txt").write_text("1 2 3\n")
            # MLflow 3 registers a `runs:/` directory only if it holds an MLmodel file.
            (model_dir / "MLmodel").write_text(f"artifact_path: model\nrun_id: {run_id}\nflavors: {{}}\n")
            mlflow.log_artifacts(str(model_dir), artifact_path="model")

        client = MlflowClient(tracking_uri=stack.tracking_uri, registry_uri=stack.tracking_uri)
        data = client.get_run(run_id).data
        assert data.params == {"alpha": "0.5"}
        assert data.metrics == {"loss": 0.25}
        # The client only talks HTTP: artifacts are proxied by the server (mlflow-artifacts:/).
        assert client.get_run(run_id).info.artifact_uri.startswith("mlflow-artifacts:")
        assert {f.path for f in client.list_artifacts(run_id)} == {"notes", "model"}
        assert mlflow.artifacts.load_text(f"runs:/{run_id}/notes/hello.txt") == "hello from the stack\n"

        version = mlflow.register_model(f"runs:/{run_id}/model", "svc-check")
        assert version.version == "1"
        client.set_registered_model_alias("svc-check", "champion", version.version)
        champion = client.get_model_version_by_alias("svc-check", "champion")
        assert champion.version == version.version and champion.run_id == run_id

    # The objects really are in SeaweedFS, under s3://mlflow/artifacts/.
    listed = stack.s3_client().list_objects_v2(Bucket=stack.bucket, Prefix="artifacts/")
    keys = {obj["Key"] for obj in listed.get("Contents", [])}
    assert any(k.startswith("artifacts/") and k.endswith(f"/{run_id}/artifacts/notes/hello.txt") for k in keys), keys
    assert any(k.endswith(f"/{run_id}/artifacts/model/weights.txt") for k in keys), keys
    body = stack.s3_client().get_object(Bucket=stack.bucket, Key=next(k for k in keys if k.endswith("hello.txt")))
    assert body["Body"].read() == b"hello from the stack\n"

    # The backend store is PostgreSQL.
    with psycopg.connect(stack.postgres_dsn) as conn:
        assert conn.execute("SHOW server_version").fetchone()[0].startswith(("1", "2"))
        (runs,) = conn.execute("SELECT count(*) FROM runs").fetchone()
        assert runs >= 1
        (params,) = conn.execute("SELECT count(*) FROM params WHERE run_uuid = %s", (run_id,)).fetchone()
        assert params == 1
