"""The trainer on real Fashion-MNIST slices: it learns, it resumes, it keeps references in step,
and Focal Distillation toward an old model lowers negative flips."""

import math

import pytest
import torch

from workers.data import Batch, batch_inputs
from workers.metrics import error_rate, negative_flip_rate
from workers.models.architectures import build_model
from workers.models.checkpoints import ModelSettings, read_checkpoint
from workers.models.predict import predict_logits
from workers.teachers.frozen import FrozenModels, LocalTeachers
from workers.training.config import TrainConfig
from workers.training.epochs import NonFiniteLossError
from workers.training.objectives import Objective
from workers.training.trainer import train


@pytest.fixture(scope="module")
def small(fashion_mnist):
    return fashion_mnist.train.take(slice(0, 5000)), fashion_mnist.eval.take(slice(0, 2000))


def test_short_training_reaches_a_sane_error(small):
    train_set, eval_set = small
    model = build_model("small-cnn", 10, seed=0)
    result = train(model, train_set, TrainConfig(epochs=2, lr=0.05), val=eval_set)
    er = error_rate(predict_logits(model, eval_set), eval_set.labels)
    assert er < 0.35, er  # chance is 0.90; two epochs on 5k images land near 0.25
    assert result.history[-1].loss < result.history[0].loss
    assert result.history[-1].val_error_rate == pytest.approx(er)


def test_same_seed_same_model(small):
    train_set, _ = small
    subset = train_set.take(slice(0, 512))
    runs = []
    for _ in range(2):
        model = build_model("mlp-small", 10, seed=5)
        train(model, subset, TrainConfig(epochs=1, seed=5, batch_size=64))
        runs.append(model.state_dict())
    assert all(torch.equal(runs[0][k], runs[1][k]) for k in runs[0])


def test_references_see_the_students_augmented_batch_ahead_of_its_step(small):
    train_set, _ = small
    subset = train_set.take(slice(0, 640))
    events, seen_inputs, seen_batches = [], [], []

    class Recorder:
        names = ("old",)

        def request(self, inputs, batch=None):
            index = len(seen_inputs)
            seen_inputs.append(inputs.clone())  # its values now: a copy, not the object the student reads
            seen_batches.append(batch)
            events.append(("request", index))

            def get():
                events.append(("get", index))
                return {"old": torch.zeros(len(inputs), 10)}

            return get

    model = build_model("mlp-small", 10, seed=0)
    student_inputs = []
    model.register_forward_pre_hook(
        lambda module, args: student_inputs.append(args[0].clone()) if module.training else None
    )
    train(model, subset, TrainConfig(epochs=1, batch_size=64, prefetch=2), Objective("fd-lm"), Recorder())
    assert len(seen_inputs) == len(student_inputs) == 10
    assert all(torch.equal(a, b) for a, b in zip(seen_inputs, student_inputs))  # copies: equal values
    assert not torch.equal(seen_inputs[0], student_inputs[1])
    # augmented: each view differs from the same samples as they are (2-pixel shifts and flips)
    assert all(
        not torch.equal(batch_inputs(subset.images, Batch(b.indices)), x) for b, x in zip(seen_batches, seen_inputs)
    )
    # the batch's indices and draws alone rebuild the very view (what a teacher actor receives)
    assert all(torch.equal(batch_inputs(subset.images, b), x) for b, x in zip(seen_batches, seen_inputs))
    assert sum(b.nbytes() for b in seen_batches) < 640 * 8  # bytes per sample, not an image's 3 KB
    # batch i+2 is requested before batch i's logits are collected
    assert events.index(("request", 2)) < events.index(("get", 0))


def test_missing_reference_is_refused(small):
    with pytest.raises(ValueError, match="needs reference logits: teacher"):
        train(build_model("mlp-small", 10), small[0], TrainConfig(epochs=1), Objective("elodi"))


def test_non_finite_loss_stops_with_the_step_number(small):
    nan_old = LocalTeachers(old=lambda x: torch.full((len(x), 10), math.nan))
    with pytest.raises(NonFiniteLossError, match="at step 1 "):
        train(build_model("mlp-small", 10), small[0], TrainConfig(epochs=1), Objective("fd-lm"), nan_old)


@pytest.mark.parametrize("warmup_epochs,stop_after", [(0.0, 2), (1.5, 1)])  # the second stops mid warm-up
def test_checkpoint_each_epoch_and_resume(small, tmp_path, warmup_epochs, stop_after):
    subset = small[0].take(slice(0, 1024))
    settings = ModelSettings("mlp-small", 10)
    config = TrainConfig(epochs=3, batch_size=128, seed=1, warmup_epochs=warmup_epochs)
    straight = settings.build(seed=1)
    train(straight, subset, config)

    class Crash(Exception):
        pass

    def crash(stats):
        if stats.epoch == stop_after:
            raise Crash

    path = tmp_path / "ckpt.pt"
    with pytest.raises(Crash):
        train(settings.build(seed=1), subset, config, settings=settings, checkpoint_path=path, on_epoch=crash)
    assert read_checkpoint(path)["epoch"] == stop_after
    resumed = settings.build(seed=99)  # weights come from the checkpoint, not the seed
    result = train(resumed, subset, config, settings=settings, checkpoint_path=path)
    assert [h.epoch for h in result.history] == [1, 2, 3] and read_checkpoint(path)["epoch"] == 3
    for k, v in straight.state_dict().items():
        assert torch.allclose(v, resumed.state_dict()[k], atol=1e-6), k


def test_fd_lm_lowers_negative_flips_on_the_same_seed(fashion_mnist):
    """v1 = 784-128 MLP, v2 = 784-512-512 MLP, both on real data; FD-LM (α = 0.9, β = 5) toward v1
    against no treatment, same seed and batches. Measured here: NFR 1.4–1.5 % → 0.8–0.9 %."""
    train_set, eval_set = fashion_mnist.train.take(slice(0, 20000)), fashion_mnist.eval
    old = build_model("mlp-small", 10, seed=1)
    train(old, train_set.take(slice(0, 10000)), TrainConfig(epochs=5, lr=0.05, augment=False, seed=1))
    old_logits = predict_logits(old, eval_set)
    nfr = {}
    for method in ("none", "fd-lm"):
        new = build_model("mlp", 10, seed=1)
        config = TrainConfig(epochs=6, lr=0.05, augment=False, seed=1)
        train(new, train_set, config, Objective(method), LocalTeachers(old=FrozenModels([old])))
        nfr[method] = negative_flip_rate(old_logits, predict_logits(new, eval_set), eval_set.labels)
    assert nfr["fd-lm"] < 0.8 * nfr["none"], nfr


def test_warmup_then_cosine_by_hand():
    """W = 1 epoch of 4 steps: lr·1/4, 2/4, 3/4, 1, then cosine from lr over the remaining 4 steps."""
    from workers.training.config import lr_schedule

    parameter = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([parameter], lr=0.4)
    scheduler = lr_schedule(optimizer, TrainConfig(epochs=2, lr=0.4, warmup_epochs=1), steps_per_epoch=4)
    lrs = []
    for _ in range(8):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    cosine = [0.4 * (1 + math.cos(math.pi * s / 4)) / 2 for s in range(4)]
    assert lrs == pytest.approx([0.1, 0.2, 0.3, 0.4, *cosine])
