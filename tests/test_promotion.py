"""Moving alias `champion`: the gate at point values and at confidence bounds, and the
compare-and-set that keeps two promotions at once from each passing against a champion the other
has just replaced (orchestrator/tracking/promotion.py)."""

from __future__ import annotations

import threading

import mlflow
import numpy as np
import pytest
from mlflow import MlflowClient

from orchestrator.cli import main
from orchestrator.policy.promotion import Verdict
from orchestrator.tracking import locks, promotion, registry, store
from orchestrator.tracking.ledger import write_ledger
from orchestrator.tracking.version_record import VersionRecord, upper_bounds
from pipelines.operations import PromoteSpec
from reliability_records import record
from workers.models.checkpoints import ModelSettings, save_checkpoint

LABELS = np.arange(100) % 10


def unscored(*_: object, **__: object) -> np.ndarray:
    """The protected set's scorer where these models have no set: the gate must not call it."""
    raise AssertionError("scored a protected set the model does not have")


def _wrong_on(indices) -> np.ndarray:
    """Class ids right on every sample but `indices`."""
    ids = LABELS.copy()
    ids[list(indices)] = (LABELS[list(indices)] + 1) % 10
    return ids


def _register(tmp_path, model: str, label: str, class_ids: np.ndarray) -> str:
    """A version whose ledger holds `class_ids` on LABELS, as a pipeline registers it."""
    settings = ModelSettings("mlp-small", 10)
    checkpoint = save_checkpoint(tmp_path / label / "model.pt", settings.build(seed=1), settings)
    with mlflow.start_run(run_name=label):
        logits = np.eye(10, dtype=np.float32)[class_ids]
        ledger = write_ledger(tmp_path / label / "predictions.parquet", logits, LABELS, np.arange(len(LABELS)), "fp")
        mlflow.log_artifact(str(ledger), "ledger")
        record = VersionRecord(method="none", arch="mlp-small", label=label, fingerprint="fp", spec_hash=label)
        return registry.register(model, str(checkpoint), record)


@pytest.fixture
def rivals(tmp_path):
    """v1 (champion, wrong on 80..99), v2 (right on 80..89 too) and v3 (right on 90..99 too): each
    passes a 5 % NFR gate against v1 (no flips), and fails it against the other (10 % NFR)."""
    store.configure()
    model = f"rivals-{tmp_path.name}"
    mlflow.set_experiment(model)
    _register(tmp_path, model, "v1", _wrong_on(range(80, 100)))
    promotion.set_champion(model, "1")
    _register(tmp_path, model, "v2", _wrong_on(range(90, 100)))
    _register(tmp_path, model, "v3", _wrong_on(range(80, 90)))
    return model


def run_together(body, args: list[str], errors: list[BaseException]) -> None:
    """`body(arg)` for each arg, each in a thread of its own, at once; fails on what they raised."""
    threads = [threading.Thread(target=body, args=(arg,)) for arg in args]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors


def _race(model: str, monkeypatch) -> dict[str, Verdict]:
    """Promote v2 and v3 at once; both first gate against v1 before either moves the alias."""
    both_gated = threading.Barrier(2, timeout=60)
    first = threading.local()
    real_gate = promotion.gate

    def gate_then_wait(name, candidate, limits, live=False, *, score):
        verdict = real_gate(name, candidate, limits, live, score=score)
        if not getattr(first, "done", False):
            first.done = True
            both_gated.wait()
        return verdict

    monkeypatch.setattr(promotion, "gate", gate_then_wait)
    verdicts: dict[str, Verdict] = {}
    errors: list[BaseException] = []

    def promote(version: str) -> None:
        try:
            verdicts[version] = promotion.promote(model, version, PromoteSpec(max_nfr=0.05), score=unscored)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    run_together(promote, ["2", "3"], errors)
    return verdicts


def test_concurrent_promotions_pass_only_against_the_champion_they_replace(rivals, monkeypatch):
    verdicts = _race(rivals, monkeypatch)
    winners = [v for v, verdict in verdicts.items() if verdict.passed]
    check = "two promotions at once: one moves champion, the other is gated again against it (compare-and-set)"
    record("security", check=check, passed=len(winners) == 1)
    assert len(winners) == 1, verdicts  # without the compare-and-set both pass against v1
    loser = "3" if winners == ["2"] else "2"
    assert verdicts[winners[0]].champion == "1"
    assert verdicts[loser].champion == winners[0]  # gated again, against the version that won
    assert f"NFR 10.00% > 5.00% (against champion v{winners[0]}" in verdicts[loser].reason
    client = MlflowClient()
    assert str(client.get_model_version_by_alias(rivals, "champion").version) == winners[0]
    assert not client.search_registered_models(f"name = '{locks.lock_name(rivals, 'promotion')}'")  # lock released


def test_a_held_lock_makes_a_promotion_wait_and_a_dead_holders_lock_is_broken(rivals, monkeypatch):
    client = MlflowClient()
    lock = locks.lock_name(rivals, "promotion")
    client.create_registered_model(lock, tags={"token": "someone else", "holder": "elsewhere:1", locks.LOCK_TAG: "p"})
    monkeypatch.setattr(locks, "LOCK_WAIT_S", 0.5)
    with pytest.raises(promotion.RegistryError, match=f"another promotion has held {lock}"):
        promotion.promote(rivals, "2", PromoteSpec(max_nfr=0.05), score=unscored)
    assert promotion.champion_of(rivals) == "1"
    monkeypatch.setattr(locks, "LEASE_S", 0.5)  # the holder died: its lock is not renewed for a lease
    monkeypatch.setattr(locks, "RENEW_S", 0.05)
    monkeypatch.setattr(locks, "LOCK_WAIT_S", 5.0)
    assert promotion.promote(rivals, "2", PromoteSpec(max_nfr=0.05), score=unscored).passed
    assert promotion.champion_of(rivals) == "2"
    assert not client.search_registered_models(f"name = '{lock}'")


def test_runs_of_one_spec_that_finish_together_register_it_once(tmp_path, monkeypatch):
    """Two runs of the same spec (a rerun submitted while the first still ran) reach registration
    at once; both pass the first check (nothing registered yet) before either registers."""
    store.configure()
    model = f"twice-{tmp_path.name}"
    mlflow.set_experiment(model)
    both_checked = threading.Barrier(2, timeout=60)
    real_check, checked = registry.versions_of_spec, threading.local()

    def check_then_wait(name, spec_hash, fingerprint):
        found = real_check(name, spec_hash, fingerprint)
        if not getattr(checked, "done", False):  # each run's first check: before it logs its model
            checked.done = True
            both_checked.wait()
        return found

    monkeypatch.setattr(registry, "versions_of_spec", check_then_wait)
    outcomes: dict[str, tuple[str, bool]] = {}
    errors: list[BaseException] = []

    def run(label: str) -> None:
        try:
            settings = ModelSettings("mlp-small", 10)
            checkpoint = save_checkpoint(tmp_path / label / "model.pt", settings.build(seed=1), settings)
            with mlflow.start_run(run_name=label):
                ledger = write_ledger(
                    tmp_path / label / "predictions.parquet",
                    np.eye(10, dtype=np.float32)[LABELS],
                    LABELS,
                    np.arange(len(LABELS)),
                    "fp",
                )
                mlflow.log_artifact(str(ledger), "ledger")
                record = VersionRecord(method="none", arch="mlp-small", fingerprint="fp", spec_hash="one-spec")
                outcomes[label] = registry.register_once(model, str(checkpoint), record)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    run_together(run, ["first", "rerun"], errors)
    versions = MlflowClient().search_model_versions(f"name = '{model}'")
    record(
        "security",
        check="two runs of one spec registering at once: one version (registration lock)",
        passed=len(versions) == 1,
    )
    assert len(versions) == 1, [(v.version, v.run_id) for v in versions]  # without the lock: two
    assert sorted(new for _, new in outcomes.values()) == [False, True]
    assert {version for version, _ in outcomes.values()} == {"1"}


def test_the_gate_at_a_confidence_level_uses_the_upper_bounds(rivals, capsys):
    # v2 against v1: no flips, ER −10 pt; at 95 % the NFR bound over 100 samples is 2.63%
    limits = PromoteSpec(max_nfr=0.02, max_er_increase=0.0)
    assert promotion.gate(rivals, "2", limits, score=unscored).passed
    bounded = promotion.gate(
        rivals, "2", PromoteSpec(max_nfr=0.02, max_er_increase=0.0, confidence=0.95), score=unscored
    )
    assert not bounded.passed
    assert bounded.reason.startswith(
        "NFR 2.63% > 2.00% (against champion v1 on 100 shared eval samples: NFR 0.00% (upper 95% bound 2.63%)"
    )
    assert "ER -10.00 pt (upper 95% bound -6.07 pt)" in bounded.reason  # 10 better, 0 worse (Tango)
    assert main(["promote", rivals, "2", "--max-nfr", "0.02", "--confidence", "0.95"]) == 1
    assert "NOT promoted: NFR 2.63% > 2.00%" in capsys.readouterr().err
    assert main(["promote", rivals, "2", "--max-nfr", "0.03", "--confidence", "0.95"]) == 0
    assert "is now champion: against champion v1" in capsys.readouterr().out
    assert main(["promote", rivals, "3", "--max-nfr", "0.03", "--confidence", "5"]) == 2  # 5 is not a level


def test_versions_show_the_upper_bounds_of_each_versions_flips_against_its_parent():
    # NFR 0 and PFR 10 % over 100 samples: NFR ≤ 2.705543 / 102.705543, ΔER ≤ −6.07 pt (Tango: test_confidence.py)
    bounds = upper_bounds(0.0, 0.1, 100)
    assert bounds["nfr_upper"] == pytest.approx(0.0263429, abs=1e-6)
    assert bounds["er_increase_upper"] == pytest.approx(-0.0607187, abs=1e-6)
    # a version without a parent, or registered before its count was tagged: no bounds
    assert upper_bounds(None, None, None) == {"nfr_upper": None, "er_increase_upper": None}
    assert upper_bounds(0.02, 0.1, None)["nfr_upper"] is None


def test_a_gate_that_cannot_read_the_champion_fails_closed(rivals, monkeypatch, capsys):
    """An MLflow error while reading `champion` refuses the promotion in one line; only a model
    with no champion alias passes as a first champion (before: any error read as "no champion")."""
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import TEMPORARILY_UNAVAILABLE

    def unavailable(self, name):
        raise MlflowException(
            "API request to /registered-models/get failed: 503\nretries exhausted", TEMPORARILY_UNAVAILABLE
        )

    limits = PromoteSpec(max_nfr=0.05)
    monkeypatch.setattr(MlflowClient, "get_registered_model", unavailable)
    with pytest.raises(registry.RegistryError, match=r"cannot read its champion .*503\); not promoted$"):
        promotion.gate(rivals, "2", limits, score=unscored)
    assert main(["promote", rivals, "2", "--max-nfr", "0.05"]) != 0
    assert "cannot read its champion" in capsys.readouterr().err
    monkeypatch.undo()
    assert promotion.champion_of(rivals) == "1"  # nothing moved
    MlflowClient().delete_registered_model_alias(rivals, "champion")
    assert promotion.gate(rivals, "2", limits, score=unscored).reason == f"{rivals} has no champion yet"
    assert promotion.champion_of(f"{rivals}-absent") is None
    record("security", check="a gate that cannot read the champion fails closed", passed=True)


def _live_session(model: str, champion: str, candidate: str, outcomes: list[tuple[int, int, int | None]]) -> str:
    """A serving session's live run whose pairs are (champion class, candidate class, label or None)."""
    from orchestrator.tracking import live

    run_id = live.start_live_run(model, champion, candidate)
    rows = [
        {"id": f"q{i}", "digest": "d", "time": 1.0, "champion_class": c, "champion_probability": 0.9,
         "candidate_class": k, "candidate_probability": 0.9}
        for i, (c, k, _) in enumerate(outcomes)
    ]  # fmt: skip
    live.write_chunk(run_id, "pairs", rows)
    labels = [{"id": f"q{i}", "label": y, "time": 2.0} for i, (_, _, y) in enumerate(outcomes) if y is not None]
    if labels:
        live.write_chunk(run_id, "labels", labels)
    return run_id


def test_promote_live_needs_labelled_live_pairs_beside_the_champion_within_the_limit(rivals, capsys):
    """v2 passes the offline gate against v1; --live also asks the serving session that shadowed v2
    beside champion v1: none, then one without labels, then one labelled pair that did not flip (too
    few for the 95 % Wilson bound of NFR to be ≤ 4 %: 65 asked), then, with --min-live 20, 1 flip in
    20 labelled pairs (5 %: refused at 4 %, passed at 6 %), which a newer empty session does not hide.
    A session beside another champion does not count."""
    args = ["promote", rivals, "2", "--max-nfr", "0.04", "--live"]
    assert main(args) == 1
    assert "no serving session shadowed v2 beside champion v1" in capsys.readouterr().err
    _live_session(rivals, "1", "2", [(0, 0, None)] * 5)
    _live_session(rivals, "3", "2", [(0, 0, 0)] * 300)  # newer, but beside v3, which is not the champion
    assert main(args) == 1
    assert "0 labelled live pairs (5 shadowed), fewer than the 65 the live gate asks" in capsys.readouterr().err
    _live_session(rivals, "1", "2", [(0, 0, 0)])
    assert main(args) == 1  # NFR 0 % on one pair: no evidence
    err = capsys.readouterr().err
    assert "1 labelled live pairs (1 shadowed), fewer than the 65 the live gate asks (--min-live; the fewest" in err
    assert "95% Wilson bound can be ≤ 4.00%)" in err
    _live_session(rivals, "1", "2", [(0, 1, 0)] + [(0, 0, 0)] * 19 + [(1, 1, None)] * 10)
    _live_session(rivals, "1", "2", [(0, 0, None)] * 3)  # a newer session with no labels hides nothing
    assert main([*args, "--min-live", "20"]) == 1
    assert "live NFR 5.00% > 4.00%" in capsys.readouterr().err
    assert main([*args[:4], "0.06", "--live", "--min-live", "20"]) == 0
    assert "live NFR 5.00% on 20 labelled of 30 shadowed requests" in capsys.readouterr().out
    record("serving_security", check="`promote --live` on one labelled live pair that did not flip is refused: "
           "fewer than the pairs a Wilson bound within --max-nfr needs", passed=True)  # fmt: skip


def test_promote_live_reads_only_the_sessions_the_registry_records_and_refuses_an_edited_one(rivals, tmp_path):
    """A run made to look like a serving session (its tags, 300 labelled pairs and not one flip) but
    not opened by `serve` is not recorded on v2: the live gate does not see it. A session `serve`
    opened (recorded) with the same pairs passes; once one of its chunks is edited, it is refused."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from orchestrator.tracking import live
    from orchestrator.tracking.store import experiment_id
    from orchestrator.tracking.tags import CANDIDATE_TAG, CHAMPION_TAG, LIVE_TAG

    clean = [(0, 0, 0)] * 300
    forged = (
        MlflowClient()
        .create_run(experiment_id(rivals), tags={LIVE_TAG: "shadow", CHAMPION_TAG: "1", CANDIDATE_TAG: "2"})
        .info.run_id
    )
    live.write_chunk(forged, "pairs", [
        {"id": f"q{i}", "digest": "d", "time": 1.0, "champion_class": 0, "champion_probability": 0.9,
         "candidate_class": 0, "candidate_probability": 0.9} for i in range(300)
    ])  # fmt: skip
    live.write_chunk(forged, "labels", [{"id": f"q{i}", "label": 0, "time": 2.0} for i in range(300)])
    assert live.run_counts(forged).labelled == 300  # a well-formed session, chain and all
    limits = PromoteSpec(max_nfr=0.04, min_live=300)
    verdict = promotion.gate(rivals, "2", limits, live=True, score=unscored)
    assert not verdict.passed and "no serving session shadowed v2 beside champion v1" in verdict.reason

    recorded = _live_session(rivals, "1", "2", clean)
    assert promotion.gate(rivals, "2", limits, live=True, score=unscored).passed
    [chunk] = [f.path for f in MlflowClient().list_artifacts(recorded, "live/labels")]
    edited = tmp_path / chunk.rsplit("/", 1)[1]  # one label changed, the chunk written again under its name
    labels = [{"id": f"q{i}", "label": 1 if i == 0 else 0, "time": 2.0} for i in range(300)]
    pq.write_table(pa.Table.from_pylist(labels, schema=live._schemas()["labels"]), edited)
    MlflowClient().log_artifact(recorded, str(edited), "live/labels")
    verdict = promotion.gate(rivals, "2", limits, live=True, score=unscored)
    assert not verdict.passed and f"serving session {recorded}: its 2 live chunks are not the 2" in verdict.reason
    record("serving_security", check="promote --live reads only the sessions the candidate's registered version "
           "records: a forged session (a run with the right tags and more pairs) is not evidence, and a recorded "
           "one with an edited chunk is refused", passed=True)  # fmt: skip
