"""`method: auto`: what it trains (pipelines/auto.py), how it chooses (on val only), and one real run on
a Fashion-MNIST slice whose choice is what the rule says, shown in the registry, `versions --json` and
the report."""

import json
import re

import pytest
from mlflow import MlflowClient

from orchestrator.cli import main
from pipelines.auto import auto_choice
from pipelines.spec import SpecError, parse_spec
from tests.conftest import SPEC_RESOURCES, run_update
from workers.models.architectures import build_model
from workers.models.checkpoints import ModelSettings, save_checkpoint
from workers.training.config import TrainConfig
from workers.training.trainer import train

AUTO = {"model": "m", "version": "v2", "arch": "mlp", "old": "old.pt"}


def assert_training_stopped_at_the_first_failure(auto, order):
    """Trained: no treatment and the candidates of `order` up to and with the first that failed its
    test; the rest are left out, each with why."""
    trained = [c["name"] for c in auto["candidates"]]
    failed = next((i for i, c in enumerate(auto["candidates"][1:], 1) if c["failed"]), len(order))
    assert trained == order[: failed + 1], (trained, order)
    left = [(name, why) for name, why in auto["skipped"] if name in order[failed + 1 :]]
    assert [name for name, _ in left] == order[failed + 1 :]
    assert all(f"not trained: {trained[failed]} failed its test first" in why for _, why in left)


def assert_the_fixed_order_chose(auto):
    """auto.json against the rule (policy/auto_choice.py): no treatment is always eligible; in the
    order trained, a candidate is tested only when every one before it was proven, proven when it
    was tested and failed nothing, and the proven one with the largest NFR cut against no treatment
    (on the samples it was counted on) ships, the earlier on a tie (else none)."""
    none, *others = auto["candidates"]
    assert none["name"] == "none" and none["eligible"]
    reached = True
    for c in others:
        assert c["tested"] == reached, c
        assert c["eligible"] == (reached and not c["failed"]), c
        assert c["val_er_upper"] >= c["val_er_change"] and c["val_nfr_upper"] >= c["val_nfr_change"]
        assert (
            bool(c["failed"])
            == (
                c["val_er_upper"] > auto["max_er_increase"]
                or c["val_nfr_upper"] >= 0
                or c["val_slice_over"] is not None
            )
            or not c["tested"]
        )
        reached = reached and c["eligible"]
    proven = [c for c in others if c["eligible"]]
    cut = min(proven, key=lambda c: (c["val_nfr_change"], proven.index(c))) if proven else {"name": "none"}
    assert auto["chosen"] == cut["name"]
    assert (auto["closest"] is None) == bool(proven)


def test_the_candidates_table_gives_each_change_with_its_bound_what_failed_and_the_closest():
    """Each candidate's val ER and NFR change against no treatment with its upper bound, whether the
    fixed order proved it, what it failed, and the closest candidate's line when none was proven."""
    from dataclasses import asdict

    from orchestrator.driver.auto import AutoRecord, candidates_table
    from orchestrator.policy.auto_choice import PairedCounts
    from workers.trial_choice import CandidateScore

    none = CandidateScore("none", 0.10, 0.05, 1.0, "none.pt", eligible=True, error_rate=0.1, nfr=0.05)
    kd = CandidateScore("kd", 0.10, 0.03, 1.0, "kd.pt", error_rate=0.11, nfr=0.03, val_er_change=0.0)
    kd.val_er_upper, kd.val_nfr_change, kd.val_nfr_upper = 0.0038, -0.02, -0.01
    kd.failed = ["ER bound +0.38 pt > +0.30"]
    fd = CandidateScore("fd-lm", 0.12, 0.02, 1.0, "fd.pt", tested=False, val_er_change=0.02, val_er_upper=0.03)
    fd.val_nfr_change, fd.val_nfr_upper = -0.03, -0.02
    left = [("elodi", "not trained: kd failed its test first in the fixed order")]
    text = candidates_table(AutoRecord("none", 0.003, [none, kd, fd], left, closest="kd came closest: …"))
    assert "left out elodi: not trained: kd failed its test first in the fixed order" in text
    assert "+0.00 pt (≤ +0.38)" in text and "-2.00 pt (≤ -1.00)" in text
    assert "not tested" in text and "kd: ER bound +0.38 pt > +0.30" in text
    assert "no candidate proven, no treatment ships: kd came closest: …" in text
    assert "cross-fitted" not in text
    pooled = {
        "none": PairedCounts(4000, 0, 0, 4000, 200, 200, 0, 0),
        "kd": PairedCounts(4000, 45, 40, 4000, 150, 200, 10, 60),
    }
    folds = {"folds": 3, "of": 10, "design_effect": 4 / 3, "trainings": 6, "seconds": 42.0}
    folds["counts"] = {k: asdict(v) for k, v in pooled.items()}
    text = candidates_table(AutoRecord("kd", 0.003, [none, kd], [], cross_fit=folds))
    assert "cross-fitted: 4,000 train samples the old model never trained on, in 3 of 10 folds" in text
    assert "(design effect 1.33; 6 trainings, 42 s), pooled with val" in text
    assert "on the folds, against no treatment: kd ER +0.12 pt, NFR -1.25 pt" in text


def test_auto_takes_candidates_in_their_order_while_they_fit_the_budget():
    method = parse_spec({**AUTO, "method": {"name": "auto", "m": 4}}).method
    every = auto_choice(method)
    assert [(c.name, c.trainings) for c in every.candidates] == [
        ("none", 1),
        ("proximal", 1),
        ("bcwi", 1),
        ("kd", 1),
        ("fd-lm", 1),
        ("elodi-legacy", 5),
        ("elodi", 1),
    ]
    assert every.replicas and every.trainings == 11
    legacy = next(c for c in every.candidates if c.name == "elodi-legacy")
    assert legacy.method.name == "elodi" and legacy.method.legacy_weight == 0.8
    assert next(c for c in every.candidates if c.name == "elodi").method.legacy_weight is None
    # bcwi and proximal start from the old weights: both left out, with the reason, where they cannot
    small = auto_choice(method.model_copy(update={"budget": 5}), old_weights_fit="other arch")
    assert [c.name for c in small.candidates] == ["none", "kd", "fd-lm"]
    assert dict(small.skipped) == {
        "bcwi": "other arch",
        "proximal": "other arch",
        "elodi-legacy": "needs 5 trainings, budget 5 leaves 2",
        "elodi": "needs 5 trainings, budget 5 leaves 2",
    }
    assert not small.replicas


def test_a_candidate_trains_as_a_spec_naming_its_method_would():
    """The same spec hash, so the candidate's checkpoints are those of that spec."""
    from orchestrator.planning.plan import Plan, PlannedSplits
    from workers.tasks.records import DataRequest

    spec = parse_spec({**AUTO, "method": {"name": "auto", "m": 2, "k": 3}})
    plan = Plan(spec, DataRequest(), PlannedSplits("key", "fp", 10), auto=auto_choice(spec.method))
    kd = plan.candidate(next(c for c in plan.auto.candidates if c.name == "kd"))
    assert kd.spec.spec_hash == parse_spec({**AUTO, "method": {"name": "kd", "m": 2, "k": 3}}).spec_hash
    assert kd.auto is None and kd.method == "kd"


def test_a_ladder_rung_is_its_method_with_its_weight_set_and_trains_as_that_spec_would():
    """kd_0.1 is kd at α 0.1 (the same spec hash as a spec naming kd with alpha 0.1, so its checkpoints),
    proximal_0.0003 proximal at λ 0.0003; rungs cross-fit as their methods do and keep their order."""
    from orchestrator.planning.plan import Plan, PlannedSplits
    from pipelines.auto import cross_fits
    from workers.tasks.records import DataRequest

    candidates = ["kd_0.1", "kd_0.3", "proximal_0.0003", "kd", "elodi"]
    spec = parse_spec({**AUTO, "arch": "mlp", "method": {"name": "auto", "m": 2, "candidates": candidates}})
    plan = Plan(spec, DataRequest(), PlannedSplits("key", "fp", 10), auto=auto_choice(spec.method))
    by_name = {c.name: c for c in plan.auto.candidates}
    assert list(by_name) == ["none", *candidates]
    assert by_name["kd_0.1"].method.name == "kd" and by_name["kd_0.1"].method.alpha == 0.1
    assert by_name["kd"].method.alpha is None  # the spec's own α
    assert by_name["proximal_0.0003"].method.proximal_weight == 0.0003
    rung = plan.candidate(by_name["kd_0.1"])
    kd = parse_spec({**AUTO, "arch": "mlp", "method": {"name": "kd", "m": 2, "alpha": 0.1}})
    assert rung.spec.spec_hash == kd.spec_hash
    assert [c.name for c in plan.auto.candidates if cross_fits(c)] == [
        "none",
        "kd_0.1",
        "kd_0.3",
        "proximal_0.0003",
        "kd",
    ]
    # a rung that starts from the old weights is left out with its method where they cannot serve
    other = auto_choice(spec.method, old_weights_fit="other arch")
    assert ("proximal_0.0003", "other arch") in other.skipped


@pytest.mark.parametrize(
    ("candidate", "line"),
    [
        ("bcwi_0.5", "auto candidate bcwi_0.5: only kd, fd-lm, proximal take a rung (NAME_VALUE)"),
        ("kd_x", "auto candidate kd_x: its rung 'x' is not a number"),
        ("kd_1.5", "auto candidate kd_1.5: kd's alpha must lie in (0, 1]"),
        ("proximal_0", "auto candidate proximal_0: proximal's proximal_weight must lie in (0, inf]"),
        ("distil_0.1", "unknown auto candidates distil_0.1"),
    ],
)
def test_a_bad_rung_gets_one_line(candidate, line):
    with pytest.raises(SpecError) as raised:
        parse_spec({**AUTO, "method": {"name": "auto", "candidates": ["kd", candidate]}})
    assert any(line in problem for problem in raised.value.problems), raised.value.problems


@pytest.mark.parametrize(
    ("method", "line"),
    [
        (
            {"name": "auto", "candidates": ["elodi"], "m": 4, "budget": 3},
            "method.budget: 3 trainings leave auto no candidate beside no treatment "
            "(it takes 1, the cheapest candidate, elodi, 5 more)",
        ),
        ({"name": "kd", "budget": 4}, "method.budget: only method auto has budget"),
        ({"name": "elodi", "max_er_increase": 0.01}, "method.max_er_increase: only method auto has max_er_increase"),
        ({"name": "auto", "candidates": ["kd", "distil"]}, "unknown auto candidates distil"),
    ],
)
def test_bad_auto_sections_get_one_line(method, line):
    with pytest.raises(SpecError) as raised:
        parse_spec({**AUTO, "method": method})
    assert any(line in problem for problem in raised.value.problems), raised.value.problems


def test_auto_needs_an_old_model():
    with pytest.raises(SpecError, match="old: method 'auto' needs an old model"):
        parse_spec({**{k: v for k, v in AUTO.items() if k != "old"}, "method": {"name": "auto"}})


def test_auto_trains_its_candidates_and_ships_the_one_the_val_rule_picks(
    ray_cluster, fashion_mnist, spec_document, tmp_path, capsys
):
    """v1 an mlp-small on 1,000 images; v2 auto on 2,000 (same arch: bcwi and proximal apply; m 2 replicas shared
    by both elodi). The version registered is the val rule's pick, its tags and `versions --json` say
    so, every candidate has val and eval figures, the check lists what auto trains."""
    old = build_model("mlp-small", 10, seed=3)
    train(old, fashion_mnist.train.take(slice(0, 1000)), TrainConfig(epochs=1, lr=0.05, seed=3))
    save_checkpoint(tmp_path / "old.pt", old, ModelSettings("mlp-small", 10))
    document = spec_document(
        model="auto-m",
        old=str(tmp_path / "old.pt"),
        # cross-fitting and training that stops at the first failure: their own tests
        method={"name": "auto", "m": 2, "k": 3, "alpha": 0.8, "cross_fit": "off", "train_untested": True},
        # one pool actor serves the candidates, which train one at a time: a second is only a process to start
        resources={**SPEC_RESOURCES, "teacher_actors": 1},
    )
    (tmp_path / "auto.yaml").write_text(json.dumps(document))
    assert main(["check", str(tmp_path / "auto.yaml")]) == 0
    checked = capsys.readouterr().out
    line = "auto trains none (1), proximal (1), bcwi (1), kd (1), fd-lm (1), elodi-legacy (3), elodi (1): 9 trainings"
    assert line + "\n" in checked  # not "at most": train_untested trains them all
    grain = re.search(r"the val split's ([\d,]+) samples: one flip or error there is ([\d.]+) pt", checked)
    assert grain and float(grain[2]) == pytest.approx(100 / int(grain[1].replace(",", "")), rel=0.05)

    result = run_update(document, tmp_path / "run")
    auto = result.auto
    names = [c["name"] for c in auto["candidates"]]
    # bcwi is tested on its cross-fitted val answers (α picked on one half, counted on the other)
    bcwi = next(c for c in auto["candidates"] if c["name"] == "bcwi")
    held = auto["bcwi"]["held_out"]
    assert bcwi["val_error_rate"] == pytest.approx(held["error_rate"])
    assert any(row["alpha"] == auto["bcwi"]["alpha"] for row in auto["bcwi"]["sweep"])  # shipped: α on all of val
    assert names == ["none", "proximal", "bcwi", "kd", "fd-lm", "elodi-legacy", "elodi"]
    assert len(result.replicas) == 2  # once, for both elodi candidates
    assert_the_fixed_order_chose(auto)
    chosen = next(c for c in auto["candidates"] if c["name"] == auto["chosen"])
    assert result.checkpoint == chosen["checkpoint"]
    assert result.metrics["vs_old"]["nfr"] == pytest.approx(chosen["nfr"])  # the eval figures are the chosen's
    assert all(c["error_rate"] is not None and c["seconds"] > 0 for c in auto["candidates"])
    # each candidate's bounds against no treatment, measured on val
    assert all((c["val_er_upper"] is None) == (c["name"] == "none") for c in auto["candidates"])
    assert all(0 < c["val_er_upper"] - c["val_er_change"] < 0.05 for c in auto["candidates"][1:])

    tags = MlflowClient().get_model_version("auto-m", result.registered_version).tags
    assert tags["method"] == "auto" and tags["auto_choice"] == auto["chosen"]
    assert main(["versions", "auto-m", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["versions"][-1]
    assert row["auto"]["chosen"] == auto["chosen"]
    assert [c["name"] for c in row["auto"]["candidates"]] == names
    assert (tmp_path / "run" / "auto_val.png").stat().st_size > 10_000
    assert main(["versions", "auto-m"]) == 0
    listed = capsys.readouterr().out
    assert f"auto → {auto['chosen']}" in listed and f"→ {auto['chosen']} " in listed
    arrow = "→ " if auto["chosen"] == "none" else ""
    assert f"val NFR (val ER; eval NFR, seconds) per candidate: {arrow}none" in listed
    assert main(["report", "auto-m", "--out", str(tmp_path / "report.html")]) == 0
    page = (tmp_path / "report.html").read_text()
    assert "Method auto: the candidates" in page and f"{auto['chosen']} (chosen)" in page


def test_auto_with_teachers_in_process_trains_its_candidates_side_by_side(
    ray_cluster, fashion_mnist, spec_document, tmp_path
):
    """teacher_actors 0: no pool to share, so a round's tasks (no treatment and the first candidate)
    are submitted together and run at once where the CPUs allow (each computes its teachers itself);
    training stops at the first candidate that fails; the choice is still the rule's."""
    old = build_model("mlp-small", 10, seed=4)
    train(old, fashion_mnist.train.take(slice(0, 500)), TrainConfig(epochs=1, lr=0.05, seed=4))
    save_checkpoint(tmp_path / "old.pt", old, ModelSettings("mlp-small", 10))
    resources = {"replica": {"cpus": 1}, "student": {"cpus": 1}, "teacher_actors": 0, "fresh_stage_workers": False}
    document = spec_document(
        model="auto-side",
        arch="mlp",
        old=str(tmp_path / "old.pt"),
        resources=resources,
        method={"name": "auto", "candidates": ["kd", "fd-lm", "bcwi"], "cross_fit": "off"},
    )
    result = run_update(document, tmp_path / "run")
    auto = result.auto
    assert_training_stopped_at_the_first_failure(auto, ["none", "kd", "fd-lm"])  # bcwi: mlp is not the old's arch
    assert auto["skipped"][0][0] == "bcwi" and "not the old model's" in auto["skipped"][0][1]
    assert_the_fixed_order_chose(auto)
    assert not result.replicas


def test_cross_fitting_adds_the_train_samples_the_old_version_never_trained_on(
    ray_cluster, fashion_mnist, spec_document, tmp_path, capsys
):
    """v1 registered on 500 images; v2 auto with cross_fit 2: no treatment, kd and bcwi train twice more,
    on 2 of the 10 folds (each on the other folds, as many samples as v2's train split); the folds'
    train samples that v1 never trained on are counted (v1's rows leak its answers into kd and bcwi;
    val is counted on the shipped candidates), the bounds widened by the design effect 1 + 2/9, and
    pooled with val's as effective counts; the check says what it trains."""
    from orchestrator.policy.auto_choice import PairedCounts

    v1 = spec_document(model="auto-folds", version="v1", data={"train_limit": 500, "eval_limit": 400})
    registered = run_update(v1, tmp_path / "v1").registered_version
    document = spec_document(
        model="auto-folds",
        old=f"auto-folds/{registered}",
        data={"train_limit": 1000, "eval_limit": 400},
        method={"name": "auto", "candidates": ["kd", "bcwi"], "cross_fit": 2},
        resources={**SPEC_RESOURCES, "teacher_actors": 0},
    )
    (tmp_path / "folds.yaml").write_text(json.dumps(document))
    assert main(["check", str(tmp_path / "folds.yaml")]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("auto cross-fits"))
    assert line.startswith("auto cross-fits none, kd, bcwi on 2 of 10 folds") and "6 more trainings at most" in line

    result = run_update(document, tmp_path / "run")
    auto, folds = result.auto, result.auto["cross_fit"]
    assert_training_stopped_at_the_first_failure(auto, ["none", "kd", "bcwi"])
    assert (folds["folds"], folds["of"], folds["trainings"]) == (2, 10, 2 * len(auto["candidates"]))
    assert sorted(folds["counts"]) == sorted(c["name"] for c in auto["candidates"])
    assert folds["design_effect"] == pytest.approx(1 + 2 / 9)
    assert_the_fixed_order_chose(auto)
    unseen = 1000 - 500  # v2's train split holds v1's 500 (the same rank keeps them) and 500 more
    for c in auto["candidates"][1:]:
        on_folds = PairedCounts(**folds["counts"][c["name"]])
        assert 0.05 * unseen < on_folds.n < 0.35 * unseen  # the 2 folds' share of them
        assert f"and {on_folds.n:,.0f} train samples the old model never trained on, in 2 of 10 folds" in c["evidence"]
        assert on_folds.effective().n == pytest.approx(on_folds.n / (1 + 2 / 9))


def test_bcwi_in_auto_is_held_to_auto_s_limit_and_never_ships_the_old_model_itself():
    from orchestrator.driver.auto_training import bcwi_held_to
    from orchestrator.planning.plan import Plan, PlannedSplits
    from workers.tasks.records import DataRequest, TrainRecord

    spec = parse_spec({**AUTO, "arch": "mlp-small", "method": {"name": "auto", "m": 2}})
    plan = Plan(spec, DataRequest(), PlannedSplits("key", "fp", 10), auto=auto_choice(spec.method))
    bcwi = plan.candidate(next(c for c in plan.auto.candidates if c.name == "bcwi"))
    tuned = TrainRecord("bcwi", 0, "t.pt", [], 1, 1, 0, 1, 0.098, 1, "h", 1.0)
    held = bcwi_held_to(bcwi, 0.100, 0.003, tuned).spec.method
    assert held.bcwi_er_tolerance == pytest.approx(0.005)  # 0.100 + 0.003 − 0.098: measured from no treatment's
    assert max(held.bcwi_alphas) == 0.9 and 1.0 not in held.bcwi_alphas
    worse = TrainRecord("bcwi", 0, "t.pt", [], 1, 1, 0, 1, 0.110, 1, "h", 1.0)
    assert bcwi_held_to(bcwi, 0.100, 0.003, worse).spec.method.bcwi_er_tolerance == 0.0


@pytest.mark.parametrize("setting", ["auto", 3])
def test_cross_fit_auto_leaves_out_the_folds_of_a_candidate_they_could_not_prove(monkeypatch, setting):
    """kd's val ER change is +0.46 pt: no count of samples at those figures brings its bound under
    +0.3 pt, so `cross_fit: auto` trains no folds for it (and so none for no treatment) and it fails
    on val, saying so; fd-lm, at ΔER 0 with a bound the folds could bring under, is cross-fitted. An
    explicit J cross-fits both."""
    import numpy as np

    from orchestrator.driver import auto_evidence
    from orchestrator.driver.auto_evidence import Evidence, add_fold_evidence
    from orchestrator.driver.auto_folds import FoldEvidence
    from orchestrator.driver.auto_training import Trained
    from orchestrator.execution.watch import StageWatch
    from orchestrator.planning.plan import Plan, PlannedSplits
    from orchestrator.policy.auto_choice import PairedCounts
    from workers.tasks.records import DataRequest

    spec = parse_spec({**AUTO, "method": {"name": "auto", "candidates": ["kd", "fd-lm"], "cross_fit": setting}})
    plan = Plan(spec, DataRequest(), PlannedSplits("key", "fp", 10), auto=auto_choice(spec.method))
    kd, fd_lm = PairedCounts(4350, 70, 50, 4350, 40, 80, 10, 50), PairedCounts(4350, 50, 50, 4350, 40, 80, 10, 50)
    evidence = Evidence(counts={"kd": kd, "fd-lm": fd_lm}, folds=(3, 10, "why", np.arange(40000)))
    evidence.where = {"kd": "val samples", "fd-lm": "val samples"}
    fitted: list[list[str]] = []

    def cross_fit(plan, folds, of, names, unseen, watch):
        fitted.append(list(names))
        return FoldEvidence(folds, of, {n: PairedCounts(10, 0, 0, 10, 0, 0, 0, 0) for n in names}, 3, 1.0)

    monkeypatch.setattr(auto_evidence, "cross_fit", cross_fit)
    add_fold_evidence(plan, evidence, Trained(), ["none", "kd"], StageWatch())
    add_fold_evidence(plan, evidence, Trained(), ["fd-lm"], StageWatch())
    if setting == "auto":
        assert fitted == [["none", "fd-lm"]]
        assert evidence.counts["kd"] == kd and evidence.where["kd"].startswith("val samples (not cross-fitted")
        assert "9,000 effective samples would not prove it" in evidence.where["kd"]  # 40,000 · 3/10 / (1 + 3/9)
        assert evidence.record is not None and evidence.record["trainings"] == 6  # none's and fd-lm's 3 folds
    else:
        assert fitted == [["none", "kd"], ["none", "fd-lm"]]
        assert "not cross-fitted" not in evidence.where["kd"]
