"""`train.distill_inputs`: the distillation term also reads a perturbed copy of each batch (token
dropout on text), so a set without unlabelled rows still distils on more than it trains on."""

import pytest
import torch

from pipelines.spec import SpecError, parse_spec
from workers.training import losses
from workers.training.objectives import Objective
from workers.training.perturb import DistillInputs, token_dropout

TEXT = {
    "model": "m",
    "version": "v2",
    "arch": "text-bag",
    "old": "old.pt",
    "data": {"dataset": "tweet-sentiment"},
    "method": {"name": "kd"},
    "train": {"distill_inputs": {"perturb": "token-dropout", "rate": 0.2}},
}


def test_token_dropout_masks_tokens_as_padding_but_never_the_first_nor_padding():
    ids = torch.tensor([[5, 6, 7, 8, 0, 0], [9, 3, 4, 0, 0, 0]])
    kept = ids.clone()
    every = token_dropout(ids, 0.999999, torch.Generator().manual_seed(0))
    assert every.tolist() == [[5, 0, 0, 0, 0, 0], [9, 0, 0, 0, 0, 0]]
    assert torch.equal(ids, kept)  # a new tensor
    assert torch.equal(token_dropout(ids, 1e-9, torch.Generator().manual_seed(0)), ids)
    many = torch.randint(2, 1000, (400, 50))
    dropped = token_dropout(many, 0.25, torch.Generator().manual_seed(1))
    changed = (dropped != many)[:, 1:].float().mean().item()
    assert changed == pytest.approx(0.25, abs=0.01) and torch.equal(dropped[:, 0], many[:, 0])
    assert set(dropped[dropped != many].tolist()) == {0}
    with pytest.raises(ValueError, match="B×L batch of token ids"):
        token_dropout(torch.zeros(2, 3, 4), 0.1)
    with pytest.raises(ValueError, match=r"rate must lie in \(0, 1\)"):
        DistillInputs(rate=1.0)


def test_the_perturbed_copy_shares_the_distillation_term_and_not_ce():
    """(1−α)·CE(s) + α·½·[D(s; old) + D(s′; old)], by KD's formula written out: T²·KL(p_old ‖ p_s)."""
    s = torch.tensor([[2.0, 0.0, -1.0], [0.5, 0.5, 0.0]])
    s_perturbed = torch.tensor([[1.0, 1.0, -1.0], [0.0, 2.0, 0.0]])
    old = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    labels = torch.tensor([0, 1])

    def kd(student, t=4.0):
        p_old = torch.softmax(old / t, 1)
        return t * t * (p_old * (p_old.log() - torch.log_softmax(student / t, 1))).sum(1).mean()

    ce = torch.nn.functional.cross_entropy(s, labels)
    expected = 0.5 * ce + 0.5 * 0.5 * (kd(s) + kd(s_perturbed))
    objective = Objective("kd", alpha=0.5)
    assert objective.with_perturbed(s, s_perturbed, labels, {"old": old}).item() == pytest.approx(expected.item())
    assert objective.with_perturbed(s, s, labels, {"old": old}).item() == pytest.approx(
        objective(s, labels, {"old": old}).item()
    )
    teacher = torch.tensor([[3.0, 0.0, 0.0], [0.0, 3.0, 0.0]])
    elodi = Objective("elodi", alpha=0.8, k=2)
    ldi, ldi_perturbed = (losses.elodi_distillation(x, labels, teacher, k=2) for x in (s, s_perturbed))
    ce = torch.nn.functional.cross_entropy(s, labels)
    assert elodi.with_perturbed(s, s_perturbed, labels, {"teacher": teacher}).item() == pytest.approx(
        (0.2 * ce + 0.8 * 0.5 * (ldi + ldi_perturbed)).item()
    )
    with pytest.raises(ValueError, match="no distillation term"):
        Objective("none").with_perturbed(s, s, labels, {})


@pytest.mark.parametrize(
    "changes, line",
    [
        (
            {"arch": "mlp-small", "data": {"dataset": "fashion-mnist"}},
            "train.distill_inputs: token-dropout perturbs text; the data is images",
        ),
        ({"method": {"name": "none"}}, "train.distill_inputs: perturbs the distillation term, and method none has"),
        ({"method": {"name": "bcwi"}}, "method bcwi has none"),
    ],
)
def test_distill_inputs_where_nothing_can_take_them_is_one_line(changes, line):
    with pytest.raises(SpecError, match=line):
        parse_spec({**TEXT, **changes})


def test_the_spec_section_reaches_the_training_config():
    from orchestrator.planning.plan import train_config

    spec = parse_spec(TEXT)
    assert spec.train.distill_inputs is not None and spec.train.distill_inputs.rate == 0.2
    config = train_config(spec, 0, spec.resources.student, student=True)
    assert config.distill_inputs == DistillInputs("token-dropout", 0.2)
    assert parse_spec({**TEXT, "method": {"name": "auto"}}).train.distill_inputs is not None


def test_a_student_distils_on_perturbed_copies_and_a_plain_training_ignores_them(tmp_path):
    """On 600 real tweets: a KD student of a text-bag trained with token dropout ends elsewhere than the
    same student without (the copies reach its loss); a plain CE training (no distillation term) ends
    exactly where it does without them."""
    from dataclasses import replace

    from benchmarks.fidelity.inputs import inputs_of
    from workers.models.checkpoints import load_model
    from workers.tasks.bodies import train_job
    from workers.tasks.records import DataRequest, TrainJob
    from workers.training.config import TrainConfig

    data = DataRequest("tweet-sentiment", train_limit=600, eval_limit=200)
    inputs = inputs_of(data, "text-bag", 32)
    config = TrainConfig(epochs=1, batch_size=64, lr=0.5, weight_decay=0.0)
    old = train_job(TrainJob("old", data, "text-bag", config, str(tmp_path / "old.pt"), inputs=inputs))
    perturbed = replace(config, seed=1, distill_inputs=DistillInputs(rate=0.3))
    teachers = (("old", (old.checkpoint,)),)

    def weights(name, train_config, objective):
        path = str(tmp_path / f"{name}.pt")
        own = teachers if objective.references else ()
        record = train_job(TrainJob(name, data, "text-bag", train_config, path, objective, teachers=own, inputs=inputs))
        assert all(torch.isfinite(torch.tensor(h["loss"])) for h in record.history)
        return load_model(record.checkpoint)[0].state_dict()

    kd = Objective("kd", alpha=0.5)
    with_copies, without = weights("kd-p", perturbed, kd), weights("kd", replace(config, seed=1), kd)
    assert any(not torch.equal(with_copies[k], without[k]) for k in without)
    plain, plain_with = weights("ce", replace(config, seed=1), Objective()), weights("ce-p", perturbed, Objective())
    assert all(torch.equal(plain[k], plain_with[k]) for k in plain)
