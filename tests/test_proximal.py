"""`method: proximal`: CE + λ·½ Σ‖w − w_old‖² from the old weights (Kuzborskij & Orabona 2013; L2-SP).
The penalty against values computed by hand, the objective, the spec and the plan (the student starts
from the old checkpoint, as BCWI's fine-tuning does), `congruent check`'s refusal, auto's candidate,
and one real update on a Fashion-MNIST slice that stays near the old model."""

import pytest
import torch
import yaml

from orchestrator.cli import main
from pipelines.auto import auto_choice
from pipelines.spec import SpecError, parse_spec
from workers.names import PROXIMAL_WEIGHT
from workers.training import losses
from workers.training.objectives import Objective

T = torch.tensor
SPEC = {"model": "m", "version": "v2", "arch": "mlp-small", "old": "old.pt"}


def test_the_penalty_is_half_the_squared_distance_summed_over_every_weight():
    """½ (‖(1, 2) − (0, 0)‖² + ‖I − 1‖²) = ½ (5 + 2) = 3.5; its gradient is w − w_old."""
    w = [T([1.0, 2.0], requires_grad=True), T([[1.0, 0.0], [0.0, 1.0]], requires_grad=True)]
    old = [T([0.0, 0.0]), T([[1.0, 1.0], [1.0, 1.0]])]
    penalty = losses.proximal_penalty(w, old)
    assert penalty.item() == pytest.approx(3.5)
    penalty.backward()
    assert w[0].grad.tolist() == [1.0, 2.0] and w[1].grad.tolist() == [[0.0, -1.0], [-1.0, 0.0]]
    assert old[0].grad is None  # the anchors carry no gradient
    assert losses.proximal_penalty(old, old).item() == 0.0


def test_a_grown_head_is_pulled_on_the_rows_both_have_and_its_new_rows_are_free():
    """A 3×2 head against the old 2×2 (a class added): rows 0 and 1 pulled, ½ ((1 + 1) + (0 + 4)) = 3;
    its bias (3 against 2): ½ · 1; a weight of another number of dimensions shares nothing: 0."""
    head = T([[1.0, 1.0], [2.0, 2.0], [5.0, 5.0]], requires_grad=True)
    bias = T([1.0, 1.0, 9.0], requires_grad=True)
    other = T([3.0, 3.0], requires_grad=True)
    anchors = [T([[0.0, 0.0], [2.0, 0.0]]), T([0.0, 1.0]), T([[0.0, 0.0], [0.0, 0.0]])]
    penalty = losses.proximal_penalty([head, bias, other], anchors)
    assert penalty.item() == pytest.approx(3.5)
    penalty.backward()
    assert head.grad.tolist() == [[1.0, 1.0], [0.0, 2.0], [0.0, 0.0]]  # the new class's row is free
    assert bias.grad.tolist() == [1.0, 0.0, 0.0] and other.grad is None  # left out altogether
    with pytest.raises(ValueError, match="2 parameters against 1 anchors"):
        losses.proximal_penalty([head, bias], anchors[:1])


def test_the_proximal_objective_is_ce_plus_lambda_times_the_penalty():
    student, labels = T([[2.0, 0.0], [0.0, 1.0]]), T([0, 0])
    objective = Objective("proximal", proximal_weight=0.2)
    assert objective.references == () and objective.pulls and not Objective("kd").pulls
    assert objective(student, labels, {}).item() == pytest.approx(losses.cross_entropy(student, labels).item())
    w, old = [T([1.0, 2.0])], [T([0.0, 0.0])]
    assert objective.pull(w, old).item() == pytest.approx(0.2 * 2.5)
    assert Objective("proximal").proximal_weight == PROXIMAL_WEIGHT
    with pytest.raises(ValueError, match="proximal_weight must be ≥ 0"):
        Objective("proximal", proximal_weight=-0.1)
    with pytest.raises(ValueError, match="no distillation term"):
        objective.with_perturbed(student, student, labels, {})


def test_training_with_a_strong_pull_stays_near_the_weights_it_started_from(fashion_mnist):
    """The trainer holds the weights it starts from (the old model's) as the anchor: after 16 steps
    λ 10 ends over 5× nearer them than λ 0 (plain fine-tuning; measured: 15×)."""
    from workers.models.architectures import build_model
    from workers.training.config import TrainConfig
    from workers.training.trainer import train

    data = fashion_mnist.train.take(slice(0, 1000))
    config = TrainConfig(epochs=2, lr=0.05, seed=1, augment=False)
    old = build_model("mlp-small", 10, seed=0)
    train(old, data, config)

    def distance(weight: float) -> float:
        model = build_model("mlp-small", 10, seed=5)
        model.load_state_dict(old.state_dict())
        train(model, data, config, Objective("proximal", proximal_weight=weight))
        squared = sum(((a - b) ** 2).sum() for a, b in zip(model.parameters(), old.parameters(), strict=True))
        return squared.item() ** 0.5

    assert distance(10.0) < distance(0.0) / 5


def test_proximal_needs_old_and_its_weight_is_its_own():
    with pytest.raises(SpecError, match="old: method 'proximal' needs an old model"):
        parse_spec({**SPEC, "old": None, "method": {"name": "proximal"}})
    with pytest.raises(SpecError, match="method.proximal_weight: only proximal"):
        parse_spec({**SPEC, "method": {"name": "kd", "proximal_weight": 0.1}})
    with pytest.raises(SpecError, match="proximal_weight"):
        parse_spec({**SPEC, "method": {"name": "proximal", "proximal_weight": -1}})
    spec = parse_spec({**SPEC, "method": {"name": "proximal", "proximal_weight": 0.1}})
    assert spec.spec_hash != parse_spec({**SPEC, "method": {"name": "proximal"}}).spec_hash  # other λ, other model


def test_the_student_starts_from_the_old_checkpoint_with_the_objective_s_lambda():
    from orchestrator.planning.plan import Plan, PlannedSplits
    from workers.tasks.records import DataRequest

    spec = parse_spec({**SPEC, "method": {"name": "proximal", "proximal_weight": 0.05}})
    job = Plan(spec, DataRequest(), PlannedSplits("key", "fp", 10)).student_job()
    assert job.init_from == "old.pt" and job.init is None
    assert job.objective == Objective("proximal", proximal_weight=0.05)
    none = parse_spec({**SPEC, "method": {"name": "none"}})
    assert Plan(none, DataRequest(), PlannedSplits("key", "fp", 10)).student_job().init_from is None


def test_auto_s_proximal_candidate_trains_as_a_proximal_spec_would_and_the_others_without_its_lambda():
    """The candidate: the spec's λ, the old weights as its start and the old model's inputs; kd from the
    same auto section keeps the checkpoints of a kd spec (λ is proximal's only)."""
    from dataclasses import replace

    from orchestrator.planning.plan import Plan, PlannedOld, PlannedSplits
    from workers.data.input_spec import InputSpec
    from workers.tasks.records import DataRequest

    spec = parse_spec({**SPEC, "method": {"name": "auto", "m": 2, "proximal_weight": 0.05}})
    old_inputs = InputSpec.image(1, 28, mean=(0.5,), std=(0.25,))
    plan = Plan(spec, DataRequest(), PlannedSplits("key", "fp", 10), auto=auto_choice(spec.method))
    plan = replace(plan, old=PlannedOld(inputs=old_inputs))
    by_name = {c.name: c for c in plan.auto.candidates}
    assert [c.name for c in plan.auto.candidates].index("proximal") == 1  # first: the least aggressive
    proximal, kd = plan.candidate(by_name["proximal"]), plan.candidate(by_name["kd"])
    assert (
        proximal.spec.spec_hash
        == parse_spec({**SPEC, "method": {"name": "proximal", "m": 2, "proximal_weight": 0.05}}).spec_hash
    )
    assert kd.spec.spec_hash == parse_spec({**SPEC, "method": {"name": "kd", "m": 2}}).spec_hash
    job = proximal.student_job()
    assert job.init_from == "old.pt" and job.inputs == old_inputs and job.objective.proximal_weight == 0.05
    assert kd.student_job().init_from is None and kd.student_job().inputs is None


def test_check_refuses_proximal_from_another_architecture_and_auto_leaves_it_out(tmp_path, capsys):
    """One line, exit 2, for `method: proximal` with an old model of another arch; auto says why it
    leaves its proximal candidate out (and bcwi's) and trains the rest."""
    from workers.models.checkpoints import ModelSettings, save_checkpoint

    settings = ModelSettings("mlp-small", 10)
    save_checkpoint(tmp_path / "old.pt", settings.build(seed=0), settings)
    base = {**SPEC, "arch": "mlp", "old": str(tmp_path / "old.pt"), "data": {"train_limit": 200, "eval_limit": 100}}
    (tmp_path / "proximal.yaml").write_text(yaml.safe_dump({**base, "method": {"name": "proximal"}}))
    assert main(["check", str(tmp_path / "proximal.yaml")]) == 2
    err = capsys.readouterr().err
    line = "method: proximal pulls toward the old weights, so arch must equal the old model's ('mlp-small')"
    assert line in err and len([row for row in err.splitlines() if "method:" in row]) == 1
    (tmp_path / "auto.yaml").write_text(yaml.safe_dump({**base, "method": {"name": "auto", "m": 2}}))
    assert main(["check", str(tmp_path / "auto.yaml")]) == 0
    out = capsys.readouterr().out
    why = "it starts from the old weights, and arch 'mlp' is not the old model's ('mlp-small')"
    assert f"auto leaves out proximal: {why}" in out and f"auto leaves out bcwi: {why}" in out
    same = {**base, "arch": "mlp-small", "method": {"name": "proximal"}}
    (tmp_path / "same.yaml").write_text(yaml.safe_dump(same))
    assert main(["check", str(tmp_path / "same.yaml")]) == 0


def test_a_proximal_version_is_described_with_its_lambda():
    from orchestrator.tracking.descriptions import method_text

    assert method_text("proximal", {"method.proximal_weight": "0.05"}) == "proximal (λ 0.05)"


def test_a_proximal_update_stays_near_the_old_model_and_agrees_with_it_more_than_no_treatment(
    ray_cluster, fashion_mnist, spec_document, tmp_path
):
    """v1 an mlp-small on 1,000 images; v2 `method: proximal` with a strong pull (λ 10) on 2,000, through
    the pipeline: its weights end within 5 % of the old ones (a plain fine-tuning from them ends ~20 %
    away, a fresh model ~140 %), and it agrees with the old model on the eval split more than no
    treatment does, with fewer flips against it."""
    from tests.conftest import run_update
    from workers.models.architectures import build_model
    from workers.models.checkpoints import ModelSettings, load_model, save_checkpoint
    from workers.models.predict import predict_logits
    from workers.training.config import TrainConfig
    from workers.training.trainer import train

    old = build_model("mlp-small", 10, seed=3)
    train(old, fashion_mnist.train.take(slice(0, 1000)), TrainConfig(epochs=1, lr=0.05, seed=3))
    save_checkpoint(tmp_path / "old.pt", old, ModelSettings("mlp-small", 10))
    results, agreement = {}, {}
    for name, method in (("none", {"name": "none"}), ("proximal", {"name": "proximal", "proximal_weight": 10.0})):
        document = spec_document(model="prox", version=f"v2-{name}", old=str(tmp_path / "old.pt"), method=method)
        results[name] = run_update(document, tmp_path / name)
    from workers.tasks.records import DataRequest
    from workers.tasks.resolve import cached_splits

    eval_split = cached_splits(DataRequest(**spec_document()["data"])).eval
    old_ids = predict_logits(old, eval_split).argmax(1)
    flat_old = torch.cat([p.detach().flatten() for p in old.parameters()])
    for name, result in results.items():
        model = load_model(result.checkpoint)[0]
        agreement[name] = (predict_logits(model, eval_split).argmax(1) == old_ids).float().mean().item()
        if name == "proximal":
            flat = torch.cat([p.detach().flatten() for p in model.parameters()])
            assert ((flat - flat_old).norm() / flat_old.norm()).item() < 0.05
    assert agreement["proximal"] > agreement["none"] + 0.15, agreement
    assert results["proximal"].metrics["vs_old"]["nfr"] < results["none"].metrics["vs_old"]["nfr"]
