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
from workers.trial_choice import CandidateScore, choose_candidate

AUTO = {"model": "m", "version": "v2", "arch": "mlp", "old": "old.pt"}


def score(name, val_er, val_nfr, er, nfr):
    return CandidateScore(name, val_er, val_nfr, 1.0, f"{name}.pt", error_rate=er, nfr=nfr)


def test_auto_chooses_on_the_validation_split_never_the_eval_split():
    """kd is best on val among the eligible; bcwi is best on eval, and elodi has the lowest val NFR but
    a val ER beyond no treatment's + 0.3 pt: choosing on eval (or ignoring ER) would pick another."""
    candidates = [
        score("none", 0.100, 0.030, 0.100, 0.030),
        score("kd", 0.102, 0.020, 0.104, 0.025),
        score("bcwi", 0.101, 0.025, 0.099, 0.010),
        score("elodi", 0.104, 0.010, 0.100, 0.012),
    ]
    assert choose_candidate(candidates, 0.003).name == "kd"
    assert [c.eligible for c in candidates] == [True, True, True, False]
    assert choose_candidate(candidates, 0.005).name == "elodi"  # within a looser limit
    # no treatment is chosen when every treatment flips more on val
    worse = [score("none", 0.10, 0.01, 0.1, 0.05), score("kd", 0.09, 0.02, 0.09, 0.0)]
    assert choose_candidate(worse, 0.003).name == "none"
    # a negative limit asks for a gain: bcwi (−0.1 pt) is out at −0.2 pt, no treatment still in
    assert choose_candidate(candidates, -0.002).name == "none"
    assert [c.eligible for c in candidates] == [True, False, False, False]
    better = [score("none", 0.100, 0.030, 0.1, 0.03), score("bcwi", 0.097, 0.020, 0.1, 0.02)]
    assert choose_candidate(better, -0.002).name == "bcwi"


def test_a_candidate_with_a_val_slice_over_the_gate_is_not_eligible():
    """kd has the lowest val NFR but one val slice over promote.max_slice_nfr: bcwi ships; no
    treatment stays eligible whatever its slices."""
    candidates = [
        score("none", 0.100, 0.030, 0.100, 0.030),
        score("kd", 0.100, 0.010, 0.100, 0.010),
        score("bcwi", 0.100, 0.020, 0.100, 0.020),
    ]
    assert choose_candidate(candidates, 0.003).name == "kd"
    candidates[1].val_slice_over = "lang=de NFR 9.00% > 5.00% on 40"
    candidates[0].val_slice_over = "lang=de NFR 7.00% > 5.00% on 40"
    assert choose_candidate(candidates, 0.003).name == "bcwi"
    assert [c.eligible for c in candidates] == [True, False, True]


def test_the_candidates_table_gives_each_val_er_change_with_its_error_and_says_when_the_bound_is_inside_it():
    """The val ER change against no treatment ± its paired standard error per candidate; one line
    when the candidates' median error exceeds auto's bound (here ±0.50 pt against +0.30 pt), none
    when it does not."""
    from orchestrator.driver.auto import AutoRecord, candidates_table

    scores = [score("none", 0.10, 0.05, 0.10, 0.05), score("kd", 0.102, 0.03, 0.11, 0.03)]
    scores += [score("fd-lm", 0.12, 0.02, 0.12, 0.02)]
    scores[1].val_er_se, scores[2].val_er_se = 0.004, 0.006
    coarse = candidates_table(AutoRecord("kd", 0.003, scores, []))
    assert "+0.20 ± 0.40 pt" in coarse and "+2.00 ± 0.60 pt" in coarse
    assert "measures a candidate's ER change to ±0.50 pt" in coarse and "bound of +0.30 pt" in coarse
    assert "measures a candidate's ER change" not in candidates_table(AutoRecord("kd", 0.006, scores, []))


def test_auto_takes_candidates_cheapest_first_while_they_fit_the_budget():
    method = parse_spec({**AUTO, "method": {"name": "auto", "m": 4}}).method
    every = auto_choice(method)
    assert [(c.name, c.trainings) for c in every.candidates] == [
        ("none", 1),
        ("kd", 1),
        ("fd-lm", 1),
        ("bcwi", 1),
        ("elodi-legacy", 5),
        ("elodi", 1),
    ]
    assert every.replicas and every.trainings == 10
    legacy = next(c for c in every.candidates if c.name == "elodi-legacy")
    assert legacy.method.name == "elodi" and legacy.method.legacy_weight == 0.8
    assert next(c for c in every.candidates if c.name == "elodi").method.legacy_weight is None
    small = auto_choice(method.model_copy(update={"budget": 5}), bcwi_fits="other arch")
    assert [c.name for c in small.candidates] == ["none", "kd", "fd-lm"]
    assert dict(small.skipped) == {
        "bcwi": "other arch",
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
    kd = plan.candidate(plan.auto.candidates[1])
    assert kd.spec.spec_hash == parse_spec({**AUTO, "method": {"name": "kd", "m": 2, "k": 3}}).spec_hash
    assert kd.auto is None and kd.method == "kd"


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
    """v1 an mlp-small on 1,000 images; v2 auto on 2,000 (same arch: bcwi applies; m 2 replicas shared
    by both elodi). The version registered is the val rule's pick, its tags and `versions --json` say
    so, every candidate has val and eval figures, the check lists what auto trains."""
    old = build_model("mlp-small", 10, seed=3)
    train(old, fashion_mnist.train.take(slice(0, 1000)), TrainConfig(epochs=1, lr=0.05, seed=3))
    save_checkpoint(tmp_path / "old.pt", old, ModelSettings("mlp-small", 10))
    document = spec_document(
        model="auto-m",
        old=str(tmp_path / "old.pt"),
        method={"name": "auto", "m": 2, "k": 3, "alpha": 0.8},
        # one pool actor serves the candidates, which train one at a time: a second is only a process to start
        resources={**SPEC_RESOURCES, "teacher_actors": 1},
    )
    (tmp_path / "auto.yaml").write_text(json.dumps(document))
    assert main(["check", str(tmp_path / "auto.yaml")]) == 0
    checked = capsys.readouterr().out
    assert "auto trains none (1), kd (1), fd-lm (1), bcwi (1), elodi-legacy (3), elodi (1): 8 trainings" in checked
    grain = re.search(r"the val split's ([\d,]+) samples: one flip or error there is ([\d.]+) pt", checked)
    assert grain and float(grain[2]) == pytest.approx(100 / int(grain[1].replace(",", "")), rel=0.05)

    result = run_update(document, tmp_path / "run")
    auto = result.auto
    names = [c["name"] for c in auto["candidates"]]
    # bcwi is compared on its cross-fitted val figures (α picked on one half, counted on the other)
    bcwi = next(c for c in auto["candidates"] if c["name"] == "bcwi")
    held = auto["bcwi"]["held_out"]
    assert (bcwi["val_error_rate"], bcwi["val_nfr"]) == (held["error_rate"], held["nfr"])
    assert any(row["alpha"] == auto["bcwi"]["alpha"] for row in auto["bcwi"]["sweep"])  # shipped: α on all of val
    assert names == ["none", "kd", "fd-lm", "bcwi", "elodi-legacy", "elodi"]
    assert len(result.replicas) == 2  # once, for both elodi candidates
    scores = [CandidateScore(**c) for c in auto["candidates"]]
    assert auto["chosen"] == choose_candidate(scores, 0.003).name
    chosen = next(c for c in auto["candidates"] if c["name"] == auto["chosen"])
    assert result.checkpoint == chosen["checkpoint"]
    assert result.metrics["vs_old"]["nfr"] == pytest.approx(chosen["nfr"])  # the eval figures are the chosen's
    assert all(c["error_rate"] is not None and c["seconds"] > 0 for c in auto["candidates"])
    # the val split's grain for each candidate's ER change: measured on val against no treatment
    assert all((c["val_er_se"] is None) == (c["name"] == "none") for c in auto["candidates"])
    assert all(0 < c["val_er_se"] < 0.05 for c in auto["candidates"] if c["name"] != "none")

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
    """teacher_actors 0: no pool to share, so the candidates' tasks are submitted together and run
    at once where the CPUs allow (each computes its teachers itself); the choice is still the rule's."""
    old = build_model("mlp-small", 10, seed=4)
    train(old, fashion_mnist.train.take(slice(0, 500)), TrainConfig(epochs=1, lr=0.05, seed=4))
    save_checkpoint(tmp_path / "old.pt", old, ModelSettings("mlp-small", 10))
    resources = {"replica": {"cpus": 1}, "student": {"cpus": 1}, "teacher_actors": 0, "fresh_stage_workers": False}
    document = spec_document(
        model="auto-side",
        arch="mlp",
        old=str(tmp_path / "old.pt"),
        resources=resources,
        method={"name": "auto", "candidates": ["kd", "fd-lm", "bcwi"]},
    )
    result = run_update(document, tmp_path / "run")
    auto = result.auto
    assert [c["name"] for c in auto["candidates"]] == ["none", "kd", "fd-lm"]  # bcwi: mlp is not the old's arch
    assert auto["skipped"][0][0] == "bcwi" and "not the old model's" in auto["skipped"][0][1]
    scores = [CandidateScore(**c) for c in auto["candidates"]]
    assert auto["chosen"] == choose_candidate(scores, 0.003).name
    assert not result.replicas


def test_bcwi_in_auto_is_held_to_auto_s_limit_and_never_ships_the_old_model_itself():
    from orchestrator.driver.auto import bcwi_held_to
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
