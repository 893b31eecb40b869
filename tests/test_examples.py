"""The shipped example specs plan: each one passes preflight — its data resolves, its `old`
(a registry reference to the version an earlier example registers) resolves and fits — in the
order their comments give (v1-small, then the others against its champion)."""

from pathlib import Path

import pytest

from pipelines.spec import load_spec

FOLDER = Path(__file__).resolve().parent.parent / "pipelines" / "examples"
EXAMPLES = sorted(p.name for p in FOLDER.glob("*.yaml"))
FIRST = "v1-small.yaml"  # registers fmnist-classifier v1 and promotes it to champion


@pytest.mark.slow
def test_every_example_passes_preflight_after_the_first_version_is_registered(tmp_path, monkeypatch):
    from orchestrator.driver.pipeline import version_tags
    from orchestrator.driver.preflight import preflight
    from orchestrator.tracking import registry, runs, store
    from orchestrator.tracking.ledger import write_ledger
    from workers.metrics import error_rate
    from workers.tasks.bodies import eval_logits, train_job
    from workers.tasks.resolve import cached_splits

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")  # a registry of its own
    monkeypatch.chdir(tmp_path)  # the examples' relative storage
    store.configure()
    first = preflight(load_spec(FOLDER / FIRST))
    assert first.spec.promote is not None and first.spec.old is None
    checkpoint = train_job(first.student_job()).checkpoint
    labels = cached_splits(first.data).eval.labels.numpy()
    logits = eval_logits({"new": checkpoint}, first.data)["new"]
    metrics = {"error_rate": error_rate(logits, labels)}
    (tmp_path / "ledger").mkdir()
    with runs.pipeline_run(first.spec):
        runs.log_file(
            write_ledger(tmp_path / "ledger" / "predictions.npz", logits, labels, first.eval_fingerprint, None),
            "ledger",
        )
        version = registry.register(first.spec.model, checkpoint, version_tags(first.spec, first, metrics))
    registry.set_champion(first.spec.model, version)  # the promotion gate passes with no champion before it
    planned = {FIRST: first}
    for name in EXAMPLES:
        if name != FIRST:
            planned[name] = preflight(load_spec(FOLDER / name))
    assert sorted(planned) == EXAMPLES
    for plan in planned.values():
        if plan.parent is not None:
            assert (plan.parent.name, plan.parent.version) == (first.spec.model, version)
            assert plan.num_classes == first.num_classes and plan.eval_fingerprint == first.eval_fingerprint
