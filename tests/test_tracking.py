"""What a pipeline's MLflow run and its registry version carry, on the embedded store, without Ray:
the evaluation's metrics on the run itself, and tags that are absent rather than empty."""

import numpy as np
from mlflow import MlflowClient

from orchestrator.tracking import runs, store
from pipelines.spec import parse_spec

REPORT = {"nfr": 0.03, "pfr": 0.08, "rel_nfr": 0.7, "er_old": 0.25, "er_new": 0.2}


def test_the_pipeline_run_carries_er_and_nfr_and_counts_once_among_the_evaluated_runs(tmp_path):
    store.configure()
    spec = parse_spec(
        {
            "model": "metrics-on-parent",
            "version": "v2",
            "arch": "mlp-small",
            "method": {"name": "fd-lm"},
            "old": "old.pt",
        }
    )
    (tmp_path / "predictions").mkdir()
    np.save(tmp_path / "predictions" / "labels.npy", np.arange(5))
    ids = []
    for version, nfr in (("v2", 0.03), ("v3", 0.01)):
        with runs.pipeline_run(spec.model_copy(update={"version": version})) as run_id:
            runs.log_evaluation({"error_rate": 0.2, "vs_old": {**REPORT, "nfr": nfr}}, tmp_path / "predictions")
        ids.append(run_id)
    client = MlflowClient()
    parent = client.get_run(ids[0])
    assert parent.data.metrics["error_rate"] == 0.2 and parent.data.metrics["vs_old.nfr"] == 0.03
    experiment = client.get_experiment_by_name(spec.model).experiment_id
    by_nfr = client.search_runs(
        [experiment], "tags.mlflow.runName != 'evaluation'", order_by=["metrics.`vs_old.nfr` ASC"]
    )
    assert [run.info.run_name for run in by_nfr] == ["v3", "v2"]  # what the MLflow UI's sort does
    points = runs.evaluated_points(spec.model, {ids[0]: "2"})
    assert [(p["label"], p["nfr"], p["version"]) for p in points] == [("v2", 0.03, "2"), ("v3", 0.01, None)]


def _register(
    model: str, label: str, predictions: np.ndarray, labels: np.ndarray, folder, parent: str | None = None
) -> str:
    """A registered version whose ledger holds `predictions` (class ids, as one-hot logits)."""
    import mlflow

    from orchestrator.tracking import registry
    from orchestrator.tracking.ledger import write_ledger
    from orchestrator.tracking.version_record import VersionRecord
    from workers.models.checkpoints import ModelSettings, save_checkpoint

    settings = ModelSettings("mlp-small", 10)
    mlflow.set_experiment(experiment_id=store.experiment_id(model))
    with mlflow.start_run(run_name=label):
        logits = np.eye(10, dtype=np.float32)[predictions]
        (folder / label).mkdir()
        ids = np.arange(len(labels))
        runs.log_file(write_ledger(folder / label / "predictions.parquet", logits, labels, ids, "feedc0ffee"), "ledger")
        record = VersionRecord(
            method="none",
            arch="mlp-small",
            label=label,
            fingerprint="feedc0ffee",
            spec_hash=label,
            error_rate=float(np.mean(predictions != labels)),
            parent_version=parent or None,
        )
        checkpoint = save_checkpoint(folder / f"{label}.pt", settings.build(), settings)
        return registry.register(model, str(checkpoint), record)


def test_the_report_explores_the_flips_of_any_version(tmp_path, capsys):
    from orchestrator.cli import main
    from orchestrator.driver.report import gather

    store.configure()
    labels = np.arange(40) % 10
    v1 = np.where(np.arange(40) < 30, labels, (labels + 1) % 10)  # right on samples 0–29
    v2 = v1.copy()
    v2[:5] = (labels[:5] + 2) % 10  # 5 negative flips against v1
    v3 = labels.copy()
    v3[10:13] = (labels[10:13] + 3) % 10  # 3 negative flips against v2
    for i, (label, ids) in enumerate((("v1", v1), ("v2", v2), ("v3", v3))):
        assert _register("explored", label, ids, labels, tmp_path, parent=str(i) if i else None) == str(i + 1)
    latest = gather("explored")
    assert (latest.version, latest.parent, latest.n_flips) == ("3", "2", 3)
    assert main(["report", "explored", "--version", "2", "--out", str(tmp_path / "v2.html")]) == 0
    assert "5 negative flips of v2 against v1" in capsys.readouterr().out
    page = (tmp_path / "v2.html").read_text()
    assert "Flip explorer: v2 against v1" in page and "<b>5</b> negative flips of v2 against v1" in page
    assert gather("explored", "1").parent is None
