"""The teacher actor's body (a plain class), BCWI's α sweep and pick, and the trial pick rule, without Ray."""

import warnings

import numpy as np
import pytest
import torch

from workers.data.input_spec import InputSpec
from workers.models.checkpoints import ModelSettings, save_checkpoint
from workers.teachers.actor import TeacherActor
from workers.teachers.frozen import FrozenModels
from workers.training.bcwi import (
    cross_fitted,
    interpolate_state_dicts,
    pick_alpha,
    pick_held_out,
    sweep_bcwi,
    sweep_table,
    val_halves,
)


@pytest.fixture()
def checkpoints(tmp_path):
    settings = ModelSettings("mlp-small", 10)
    paths = [str(save_checkpoint(tmp_path / f"r{i}.pt", settings.build(seed=i), settings)) for i in range(3)]
    return settings, paths


def test_teacher_actor_serves_group_means_and_top_k(checkpoints):
    from workers.data import Batch, to_model_input

    settings, paths = checkpoints
    actor = TeacherActor({"teacher": paths[:2], "old": paths[2:]})
    images = np.random.default_rng(0).integers(0, 256, (6, 1, 28, 28), dtype=np.uint8)
    images.setflags(write=False)  # arrays from Ray's object store are read-only
    actor.hold_split(images)
    batch = Batch(torch.tensor([4, 1, 0, 5], dtype=torch.int32))
    x = to_model_input(torch.from_numpy(images[[4, 1, 0, 5]].copy()), settings.inputs.mean, settings.inputs.std)
    out = actor.logits_of(batch, {"teacher": 3})
    expected = FrozenModels([settings.build(seed=0), settings.build(seed=1)])(x)
    values, indices = out["teacher"]
    assert values.shape == (4, 3) and indices.dtype == np.int32
    assert np.allclose(values, expected.topk(3).values.numpy(), atol=1e-6)
    assert np.array_equal(indices, expected.topk(3).indices.numpy())
    assert np.allclose(out["old"], settings.build(seed=2).eval()(x).detach().numpy(), atol=1e-6)
    assert actor.logits_of(batch, names=["teacher"]).keys() == {"teacher"}
    assert actor.logits_of(batch)["teacher"].shape == (4, 10)
    assert actor.info()["batches_served"] == 3


def test_bcwi_pick_is_the_lowest_nfr_within_the_error_budget():
    # pretend: ER rises with α (the old model is worse), NFR falls with α
    table = [{"alpha": a, "error_rate": 0.10 + 0.02 * a, "nfr": 0.03 * (1 - a)} for a in (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)]
    assert pick_alpha(table, er_tolerance=0.009) == 0.4  # ER(0.4) = 0.108 ≤ 0.109 < ER(0.6) = 0.112
    assert pick_alpha(table, er_tolerance=0.0) == 0.0


def test_bcwi_sweep_predicts_at_each_interpolation_and_counts_on_the_rows_asked():
    old, new = {"w": torch.tensor([1.0])}, {"w": torch.tensor([0.0])}
    seen = []

    def predict(state):  # one sample, class 1 once θ ≥ 0.5
        seen.append(round(state["w"].item(), 6))
        return torch.tensor([[0.5, state["w"].item()]])

    ids = sweep_bcwi(old, new, predict, alphas=[1.0, 0.25, 0.75])
    assert seen == [0.0, 0.25, 0.75, 1.0] and list(ids) == [0.0, 0.25, 0.75, 1.0]
    assert [int(v[0]) for v in ids.values()] == [0, 0, 1, 1]
    labels, old_ids = np.array([1, 1, 0, 0]), np.array([1, 0, 0, 0])
    table = sweep_table({0.0: np.array([0, 1, 0, 1])}, old_ids, labels, rows=np.array([True, True, True, False]))
    assert table == [{"alpha": 0.0, "error_rate": 1 / 3, "nfr": 1 / 3}]  # 2 of 3 rows: 1 error, a flip


def test_bcwi_cross_fitted_scores_each_half_at_the_alpha_the_other_half_picks():
    """Hand-computed: 4 samples, halves A = {0, 1}, B = {2, 3}; old right on all; labels 0.
    α = 0 errs on 0 and 2; α = 0.5 errs on 3 only. On A, α = 0.5 flips 0 (α = 0: 1), so A picks
    0.5, scored on B: 1 error, 1 flip. On B, each α flips 1: tie, the smaller α = 0, scored on A:
    1 error, 1 flip. ER = NFR = 2/4, where α = 0.5 picked on all four scores itself 1/4."""
    labels = np.zeros(4, np.int64)
    old_ids = np.zeros(4, np.int64)
    ids = {0.0: np.array([1, 0, 1, 0]), 0.5: np.array([0, 0, 0, 1])}
    first = np.array([True, True, False, False])
    assert pick_alpha(sweep_table(ids, old_ids, labels), er_tolerance=0.0) == 0.5
    assert sweep_table(ids, old_ids, labels)[1] == {"alpha": 0.5, "error_rate": 0.25, "nfr": 0.25}
    figures, held = cross_fitted(ids, old_ids, labels, 0.0, first)
    assert figures == {"error_rate": 0.5, "nfr": 0.5}
    assert held.tolist() == [1, 0, 0, 1]  # A at B's α = 0, B at A's α = 0.5: what auto's paired tests count
    halves = val_halves(11)
    assert halves.sum() == 5 and np.array_equal(halves, val_halves(11))  # fixed, half the samples


def test_bcwi_pick_is_held_to_its_limit_on_cross_fitted_figures():
    """Hand-computed: 8 samples, labels 0, old right on {0, 1, 4, 5}; halves A = 0–3, B = 4–7.
    α = 0 errs on {1, 5} (ER 2/8, NFR 2/8), α = 0.5 on {1, 2, 3} (3/8, 1/8), α = 1 on {2, 3, 6, 7}
    (4/8, 0). Tolerance 2/8 (limit 4/8): all of val picks α = 1; cross-fitted, A picks 1 (2 errors on
    B), B picks 0.5 (ties at 0 flips go to the smaller α; 3 errors on A): 5/8 > 4/8. At the next
    tolerance the sweep offers, 1/8: A picks 0 (1 error on B), B picks 0.5 (3 on A): 4/8, inside; all
    of val at 1/8 picks α = 0.5."""
    labels = np.zeros(8, np.int64)
    old_ids = np.array([0, 0, 1, 1, 0, 0, 1, 1])
    ids = {
        0.0: np.array([0, 1, 0, 0, 0, 1, 0, 0]),
        0.5: np.array([0, 1, 1, 1, 0, 0, 0, 0]),
        1.0: np.array([0, 0, 1, 1, 0, 0, 1, 1]),
    }
    first = np.arange(8) < 4
    assert pick_alpha(sweep_table(ids, old_ids, labels), 0.25) == 1.0
    assert cross_fitted(ids, old_ids, labels, 0.25, first)[0] == {"error_rate": 0.625, "nfr": 0.125}
    alpha, figures, held = pick_held_out(ids, old_ids, labels, 0.25, first)
    assert (alpha, figures) == (0.5, {"error_rate": 0.5, "nfr": 0.25})
    assert held.tolist() == [0, 1, 1, 1, 0, 1, 0, 0]  # A at B's 0.5, B at A's 0 (its error on 5)
    assert pick_held_out(ids, old_ids, labels, 0.375, first)[0] == 1.0  # 1 error more allowed: inside


def test_select_bcwi_interpolates_at_the_alpha_the_val_sweep_picks(fashion_mnist):
    """On a real val slice: the pick follows the rule (`pick_held_out`, on the fixed halves) over
    the interpolations it reports, the returned weights are the interpolation at that α, and the
    fine-tuned model is left as it was."""
    from workers.metrics import error_rate, negative_flip_rate
    from workers.models.predict import predict_logits
    from workers.training.bcwi import select_bcwi
    from workers.training.config import TrainConfig
    from workers.training.trainer import train

    settings = ModelSettings("mlp-small", 10)
    old, tuned = settings.build(seed=1), settings.build(seed=1)
    train(old, fashion_mnist.train.take(slice(0, 600)), TrainConfig(epochs=1, lr=0.05, seed=1))
    tuned.load_state_dict(old.state_dict())
    train(tuned, fashion_mnist.train.take(slice(600, 1800)), TrainConfig(epochs=1, lr=0.05, seed=2))
    before = {k: v.clone() for k, v in tuned.state_dict().items()}
    val = fashion_mnist.val.take(slice(0, 1000))
    choice = select_bcwi(old, tuned, val, alphas=[0.25, 0.5, 0.75, 1.0], er_tolerance=0.01)

    assert [row["alpha"] for row in choice.sweep] == [0.0, 0.25, 0.5, 0.75, 1.0]
    labels, old_ids = val.labels.numpy(), predict_logits(old, val).argmax(1).numpy()
    probe = settings.build()
    ids = {}
    for row in choice.sweep:
        probe.load_state_dict(interpolate_state_dicts(old.state_dict(), before, row["alpha"]))
        ids[row["alpha"]] = predict_logits(probe, val).argmax(1).numpy()
    alpha, held_out, held_classes = pick_held_out(ids, old_ids, labels, 0.01, val_halves(len(labels)))
    assert (choice.alpha, choice.held_out) == (alpha, held_out)
    assert np.array_equal(choice.held_out_classes, held_classes)
    assert all(torch.equal(before[k], v) for k, v in tuned.state_dict().items())
    expected = interpolate_state_dicts(old.state_dict(), before, choice.alpha)
    assert all(torch.allclose(expected[k], v) for k, v in choice.state_dict.items())
    probe.load_state_dict(choice.state_dict)
    logits = predict_logits(probe, val)
    picked = next(row for row in choice.sweep if row["alpha"] == choice.alpha)
    assert error_rate(logits, val.labels) == picked["error_rate"]
    assert negative_flip_rate(predict_logits(old, val), logits, val.labels) == picked["nfr"]


def test_pareto_front_and_pick_rule():
    from workers.trial_choice import pareto_front, pick_trial

    rows = [
        {"error_rate": 0.10, "nfr": 0.030},  # 0: lowest ER
        {"error_rate": 0.11, "nfr": 0.020},  # 1: front
        {"error_rate": 0.12, "nfr": 0.025},  # 2: dominated by 1
        {"error_rate": 0.14, "nfr": 0.010},  # 3: lowest NFR, too costly in ER
        {"error_rate": 0.11, "nfr": 0.020},  # 4: ties with 1: neither dominates
    ]
    assert pareto_front(rows) == [0, 1, 4, 3]
    assert pick_trial(rows, reference_error_rate=0.105, tolerance=0.005) == 1  # 3 exceeds 0.110
    assert pick_trial(rows, reference_error_rate=0.105, tolerance=0.05) == 3
    assert pick_trial(rows, reference_error_rate=0.05, tolerance=0.0) is None


def test_in_process_teachers_read_each_batch_through_their_own_inputs_as_the_pool_does(tmp_path):
    """With `teacher_actors: 0` the old model reads the student's augmented training batch
    normalised by its own InputSpec (here another mean and std than the student's), exactly as a
    pool actor rebuilds it: the logits of one batch agree within bf16's tolerance."""
    from workers.data.input_spec import InputSpec
    from workers.tasks.records import DataRequest, TrainJob
    from workers.tasks.resolve import cached_splits, local_teachers
    from workers.training.config import TrainConfig
    from workers.training.epochs import batches
    from workers.training.objectives import Objective

    data = DataRequest(train_limit=256, eval_limit=64)
    old_reads = InputSpec.image(1, 28, mean=(0.2,), std=(0.3,))
    student_reads = InputSpec.image(1, 28, mean=(0.6,), std=(0.2,))
    settings = ModelSettings("small-cnn", 10, old_reads)
    old = str(save_checkpoint(tmp_path / "old.pt", settings.build(seed=1), settings))
    config = TrainConfig(batch_size=32, precision="bf16")  # augmentation on: 2-pixel shifts and flips
    job = TrainJob(
        "student", data, "small-cnn", config, str(tmp_path / "student.pt"), Objective("kd"),
        teachers=(("old", (old,)),), inputs=student_reads,
    )  # fmt: skip
    train = cached_splits(data).train
    batch = next(batches(train, config, epoch=0))
    assert batch.draws is not None
    student_view = train.encoded(student_reads).batch(batch)  # what the student trains on
    references = local_teachers(job)
    assert references is not None
    in_process = references.request(student_view, batch)()["old"]
    actor = TeacherActor({"old": [old]}, precision="bf16")
    actor.hold_split(train.images.numpy())
    through_pool = torch.from_numpy(np.asarray(actor.logits_of(batch)["old"]))
    assert torch.allclose(in_process, through_pool, rtol=2e-2, atol=2e-2), (in_process - through_pool).abs().max()


@pytest.mark.parametrize("arch", ["small-cnn", "resnet8", "text-cnn", "text-transformer"])
def test_teachers_of_one_architecture_run_as_one_batched_model_with_the_loops_logits(arch):
    """m teachers stacked under vmap (one forward for all) give the mean logits, and so the top-K, of
    one forward per teacher; BatchNorm reads each teacher's own running statistics."""
    from workers.data.tokenizer import text_input

    torch.manual_seed(0)
    if arch.startswith("text-"):
        inputs = text_input(["the cat sat on the mat", "a dog ran in the park", "rain falls all day"], vocab_size=120)
        x = torch.randint(2, inputs.vocab_size, (16, 10))
        x[0, 4:] = 0  # padding
    else:
        inputs, x = InputSpec.image(), torch.randn(16, 1, 28, 28)
    models = [ModelSettings(arch, 10, inputs).build(seed) for seed in range(3)]
    for model in models:  # distinct running statistics per teacher
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.uniform_(-0.5, 0.5)
                module.running_var.uniform_(0.5, 2.0)
    stacked = FrozenModels(models)
    one_by_one = FrozenModels(models, stack=False)
    assert stacked.stacked and not one_by_one.stacked
    with warnings.catch_warnings(record=True) as caught:  # nothing for the user's terminal
        warnings.simplefilter("always")
        together = stacked(x)
    alone = one_by_one(x)
    assert [str(w.message) for w in caught] == []
    assert torch.allclose(together, alone, atol=1e-5)
    assert torch.equal(together.topk(3).indices, alone.topk(3).indices)


def test_a_streamed_splits_teacher_logits_are_computed_once_per_sample_id(monkeypatch):
    """`SampleLogitCache`: three epochs of batches of hashed ids (negative ones, a duplicate within a
    batch, a merge of the recent ids every 16) compute each batch in epoch 1 only and then answer
    every sample with its own logits, in the batch's order."""
    from workers.teachers.frozen import SampleLogitCache

    monkeypatch.setattr(SampleLogitCache, "MERGE_EVERY", 16)
    rng = np.random.default_rng(0)
    ids = rng.integers(-(2**62), 2**62, 100)
    ids[7] = ids[3]  # two samples with one key (the same text) share an id and a side
    truth = {int(i): torch.randn(4) for i in np.unique(ids)}
    cache, computed = SampleLogitCache(samples=len(ids)), []
    for epoch in range(3):
        order = rng.permutation(len(ids))
        for start in range(0, len(ids), 12):
            batch = torch.from_numpy(ids[order[start : start + 12]])

            def compute(batch=batch, epoch=epoch):
                computed.append(epoch)
                return torch.stack([truth[int(i)] for i in batch])

            logits = cache.get(batch, compute)
            assert torch.equal(logits, torch.stack([truth[int(i)] for i in batch]))
    assert computed == [0] * 9 and cache.used == 99 and len(cache.recent) < 16


def test_a_kept_samples_logits_are_its_first_ones_beside_new_samples():
    """`SampleLogitCache.get` on a batch that mixes kept and new samples computes it and answers the
    kept ones with their first logits, the new ones with this computation's; `compute` here answers
    each call a little differently, as a CPU whose summation order follows the batch's shape."""
    from workers.teachers.frozen import SampleLogitCache

    cache, calls = SampleLogitCache(samples=8), [0]

    def compute(ids: torch.Tensor) -> torch.Tensor:
        calls[0] += 1
        return ids.float()[:, None] + torch.tensor([0.0, 1e-3 * calls[0]])

    first = cache.get(torch.arange(0, 4), lambda: compute(torch.arange(0, 4)))
    mixed = cache.get(torch.arange(2, 8), lambda: compute(torch.arange(2, 8)))
    assert torch.equal(mixed[:2], first[2:]) and torch.equal(mixed[2:, 1], torch.arange(4, 8) + torch.tensor(2e-3))
    assert calls == [2] and torch.equal(cache.get(torch.arange(3, 6), lambda: compute(torch.arange(0))), mixed[1:4])


def test_in_process_teachers_of_a_stream_run_once_per_sample_without_augmentation():
    """FrozenModels on streamed batches: unaugmented batches are answered from the id cache after
    their first pass (the model runs no more), augmented ones always run."""
    from workers.data import Batch
    from workers.data.augment import AugmentDraws
    from workers.data.streamed import StreamedInputs

    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 3))
    calls = []
    model.register_forward_hook(lambda module, args, out: calls.append(len(out)))
    teachers = FrozenModels([model], reader=StreamedInputs(None), samples=6)
    values = torch.arange(24, dtype=torch.uint8).reshape(6, 1, 2, 2)
    batch = Batch(torch.tensor([11, -5, 30, 2, 8, 9]), values=values, labels=torch.zeros(6, dtype=torch.int64))
    first = teachers.of_batch(torch.empty(0), batch)
    again = teachers.of_batch(torch.empty(0), Batch(batch.indices.flip(0), values=values.flip(0), labels=batch.labels))
    assert calls == [6] and torch.allclose(again, first.flip(0))
    draws = AugmentDraws.draw(6, torch.Generator().manual_seed(0), 1, True, False)
    teachers.of_batch(torch.empty(0), Batch(batch.indices, draws, values, labels=batch.labels))
    assert calls == [6, 6]


def test_a_pool_actor_answers_a_streamed_batch_as_the_in_process_teachers_do(checkpoints):
    """A teacher actor made for a streamed split takes the batch itself (its uint8 samples and
    draws: no split held): its top-K equal the in-process teachers' on an augmented batch, and an
    unaugmented batch's answers follow its samples' order."""
    from workers.data import Batch
    from workers.data.augment import AugmentDraws
    from workers.data.streamed import StreamedInputs
    from workers.models.checkpoints import load_model

    settings, paths = checkpoints
    values = torch.randint(0, 256, (8, 1, 28, 28), dtype=torch.uint8)
    ids = torch.tensor([40, -3, 7, 12, 99, 5, 61, 18])
    draws = AugmentDraws.draw(8, torch.Generator().manual_seed(1), 2, True, False)
    augmented = Batch(ids, draws, values, labels=torch.zeros(8, dtype=torch.int64))
    actor = TeacherActor({"teacher": paths[:2]}, streamed=True)
    assert actor.split is None
    values_k, indices_k = actor.logits_of(augmented, {"teacher": 3})["teacher"]
    models = [load_model(path)[0] for path in paths[:2]]
    in_process = FrozenModels(models, reader=StreamedInputs(settings.inputs), samples=8).of_streamed(augmented)
    top = in_process.topk(3)
    assert np.allclose(values_k, top.values.numpy(), atol=1e-5) and np.array_equal(indices_k, top.indices.numpy())
    first = actor.logits_of(Batch(ids, None, values, labels=augmented.labels))["teacher"]
    shuffled = actor.logits_of(Batch(ids.flip(0), None, values.flip(0), labels=augmented.labels))["teacher"]
    assert np.allclose(shuffled, np.flip(first, 0), atol=1e-6) and not np.allclose(first, first[::-1])
