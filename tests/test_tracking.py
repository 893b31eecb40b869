"""What a pipeline's MLflow run and its registry version carry, on the embedded store, without Ray:
the evaluation's metrics on the run itself, and tags that are absent rather than empty."""

import numpy as np
from mlflow import MlflowClient

from orchestrator.tracking import runs, store
from pipelines.spec import parse_spec

REPORT = {"nfr": 0.03, "pfr": 0.08, "rel_nfr": 0.7, "er_old": 0.25, "er_new": 0.2}


def test_the_pipeline_run_carries_er_and_nfr_and_counts_once_among_the_evaluated_runs(tmp_path):
    store.configure()
    spec = parse_spec({"model": "metrics-on-parent", "version": "v2", "arch": "mlp-small",
                       "method": {"name": "fd-lm"}, "old": "old.pt"})
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
    by_nfr = client.search_runs([experiment], "tags.mlflow.runName != 'evaluation'", order_by=["metrics.`vs_old.nfr` ASC"])
    assert [run.info.run_name for run in by_nfr] == ["v3", "v2"]  # what the MLflow UI's sort does
    points = runs.evaluated_points(spec.model, {ids[0]: "2"})
    assert [(p["label"], p["nfr"], p["version"]) for p in points] == [("v2", 0.03, "2"), ("v3", 0.01, None)]
