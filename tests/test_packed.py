"""Replicas trained as one batched model (workers/training/packed.py) and the trainer's device-side options
(bf16 autocast, in-process bf16 teachers), on real Fashion-MNIST slices, on the CPU — the very code
a GPU runs."""

from dataclasses import replace

import pytest
import torch

from workers.metrics import error_rate
from workers.models.architectures import build_model
from workers.models.checkpoints import load_model, read_checkpoint
from workers.models.predict import predict_logits
from workers.tasks import bookkeeping
from workers.tasks.bodies import train_job, train_pack
from workers.tasks.records import DataRequest, TrainJob
from workers.teachers.frozen import FrozenModels
from workers.training.config import TrainConfig
from workers.training.trainer import train

DATA = DataRequest(train_limit=768, eval_limit=300)


def jobs(folder, prefix, count=3, epochs=2):
    return [
        TrainJob(
            f"replica-{i}",
            DATA,
            "small-cnn",
            TrainConfig(epochs=epochs, batch_size=128, lr=0.05, seed=40 + i),
            str(folder / f"{prefix}-{i}.pt"),
        )
        for i in range(count)
    ]


def weights(path):
    return load_model(path)[0].state_dict()


def test_packed_replicas_train_as_each_would_alone_and_write_their_own_checkpoints(tmp_path):
    packed = train_pack(jobs(tmp_path, "packed"))
    alone = [train_job(job) for job in jobs(tmp_path, "alone")]
    for p, a in zip(packed, alone):
        assert p.seed == a.seed and p.steps == a.steps == 12 and p.epochs_run == 2
        assert abs(p.val_error_rate - a.val_error_rate) < 0.01
        wp, wa = weights(p.checkpoint), weights(a.checkpoint)
        assert all(torch.allclose(wp[k].float(), wa[k].float(), atol=2e-2) for k in wp)  # summation order only
    # different seeds: three different models, not one copied three times
    assert not torch.equal(weights(packed[0].checkpoint)["0.weight"], weights(packed[1].checkpoint)["0.weight"])
    # a packed replica's checkpoint is the trainer's own format: train_job reuses it as finished
    reused = train_job(jobs(tmp_path, "packed")[1])
    assert reused.epochs_run == 0 and reused.val_error_rate == packed[1].val_error_rate


def test_a_packed_run_killed_after_an_epoch_resumes_to_the_same_models(tmp_path, monkeypatch):
    straight = train_pack(jobs(tmp_path, "straight"))
    calls = []
    original = bookkeeping.Bookkeeping.epoch_end

    def crash_after_the_first_epoch(self, stats):
        original(self, stats)
        calls.append(self.job.name)
        if len(calls) == 3:  # every replica has written epoch 1
            raise KeyboardInterrupt

    monkeypatch.setattr(bookkeeping.Bookkeeping, "epoch_end", crash_after_the_first_epoch)
    with pytest.raises(KeyboardInterrupt):
        train_pack(jobs(tmp_path, "resumed"))
    monkeypatch.setattr(bookkeeping.Bookkeeping, "epoch_end", original)
    assert {read_checkpoint(j.checkpoint_uri)["epoch"] for j in jobs(tmp_path, "resumed")} == {1}
    resumed = train_pack(jobs(tmp_path, "resumed"))
    for s, r in zip(straight, resumed):
        assert r.resumed_from == 1 and r.epochs_run == 1 and [h["epoch"] for h in r.history] == [1, 2]
        ws, wr = weights(s.checkpoint), weights(r.checkpoint)
        assert all(torch.allclose(ws[k].float(), wr[k].float(), atol=1e-5) for k in ws)


def test_packing_refuses_replicas_that_differ_in_more_than_the_seed(tmp_path):
    mixed = jobs(tmp_path, "mixed", count=2)
    mixed[1] = TrainJob("replica-1", DATA, "lenet", mixed[1].config, str(tmp_path / "lenet.pt"))
    with pytest.raises(ValueError, match="share data, architecture and settings"):
        train_pack(mixed)


@pytest.mark.parametrize("arch", ["text-cnn", "text-transformer"])
def test_text_models_with_dropout_train_packed(tmp_path, arch):
    """Dropout under vmap draws per replica (vmap's default randomness refuses any random op):
    text-cnn and text-transformer replicas train packed, each to a model of its own."""
    from workers.data.tokenizer import text_input
    from workers.tasks.resolve import cached_splits

    data = DataRequest(source="tweet-sentiment", train_limit=384, eval_limit=100)
    inputs = text_input(cached_splits(data).train.texts, vocab_size=400, max_length=24)
    config = TrainConfig(epochs=1, batch_size=64, lr=0.01, augment=False)
    replicas = [
        TrainJob(f"replica-{i}", data, arch, replace(config, seed=i), str(tmp_path / f"r{i}.pt"), inputs=inputs)
        for i in range(2)
    ]
    records = train_pack(replicas)
    assert [r.epochs_run for r in records] == [1, 1] and all(r.val_error_rate is not None for r in records)
    first, second = weights(records[0].checkpoint), weights(records[1].checkpoint)
    assert not torch.equal(first["embedding.weight"], second["embedding.weight"])


def test_replicas_that_start_from_the_old_weights_train_packed(tmp_path):
    """`init: old` with `pack > 1`: each packed replica starts from the old model's weights."""
    from workers.models.checkpoints import ModelSettings, save_checkpoint

    settings = ModelSettings("small-cnn", 10)
    old = str(save_checkpoint(tmp_path / "old.pt", settings.build(seed=7), settings))
    starting = [replace(job, init_from=old) for job in jobs(tmp_path, "from-old", count=2, epochs=1)]
    starting = [replace(job, config=replace(job.config, lr=1e-9)) for job in starting]  # barely moves
    records = train_pack(starting)
    start = weights(old)
    for record in records:
        trained = weights(record.checkpoint)
        assert all(
            torch.allclose(trained[k].float(), start[k].float(), atol=1e-4)
            for k in start
            if k.endswith(("weight", "bias"))
        )


def test_bf16_training_and_bf16_teachers_on_the_cpu(fashion_mnist):
    train_set, val = fashion_mnist.train.take(slice(0, 2000)), fashion_mnist.val.take(slice(0, 1000))
    model = build_model("small-cnn", 10, seed=5)
    result = train(model, train_set, TrainConfig(epochs=1, batch_size=64, lr=0.05, seed=5, precision="bf16"), val=val)
    assert result.history[0].loss == result.history[0].loss and result.history[0].val_error_rate < 0.6
    assert next(model.parameters()).dtype == torch.float32  # master weights stay fp32
    full = FrozenModels([model])(torch.randn(8, 1, 28, 28, generator=torch.Generator().manual_seed(0)))
    half = FrozenModels([model], precision="bf16")(
        torch.randn(8, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    )
    assert half.dtype == torch.float32 and torch.allclose(full, half, atol=0.15)
    assert error_rate(predict_logits(model, val), val.labels) == result.history[0].val_error_rate


def test_compiled_training_learns_like_eager(fashion_mnist):
    """torch.compile of the training step (inductor on the CPU here): same batches, same error up to
    kernel-level float differences."""
    train_set, val = fashion_mnist.train.take(slice(0, 2000)), fashion_mnist.val.take(slice(0, 1000))
    eager, compiled = build_model("mlp", 10, seed=6), build_model("mlp", 10, seed=6)
    config = TrainConfig(epochs=1, batch_size=128, lr=0.05, seed=6)
    first = train(eager, train_set, config, val=val)
    second = train(compiled, train_set, TrainConfig(**{**config.__dict__, "compile": True}), val=val)
    assert abs(first.history[0].val_error_rate - second.history[0].val_error_rate) < 0.02
    assert "_orig_mod" not in "".join(compiled.state_dict())  # checkpoints hold the plain model's keys


@pytest.mark.bench
def test_the_gpu_benchmark_runs_every_measure_on_the_cpu(tmp_path):
    """benchmarks/performance/gpu_throughput.py is prepared here and run on a bare GPU machine: its --quick mode
    runs every measure (hand loop, trainer, ELODI student with stacked and one-at-a-time teachers,
    replicas as processes and packed)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.performance.gpu_throughput",
            "--quick",
            "--skip-compile",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=root,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    measures = json.loads((tmp_path / "results.json").read_text())["measures"]
    assert len(measures) == 11 and all(isinstance(v, float) and v > 0 for v in measures.values()), measures
    assert "| (d) 2 replicas packed |" in (tmp_path / "gpu-throughput.md").read_text()


def test_a_packed_checkpoint_holds_every_field_of_a_solo_one_and_serves_as_old(tmp_path):
    """Field by field, a packed replica's checkpoint is what a replica trained alone writes (the
    same keys, types and values but the weights' float noise and the timings), so it resumes,
    registers and serves as the `old` model of the next version."""
    from orchestrator.planning.preflight import preflight
    from pipelines.spec import parse_spec

    packed = read_checkpoint(train_pack(jobs(tmp_path, "packed", count=2, epochs=1))[1].checkpoint)
    solo = read_checkpoint(train_job(jobs(tmp_path, "solo", count=2, epochs=1)[1]).checkpoint)
    assert packed.keys() == solo.keys()
    for key in ("model", "classes_seen", "epoch", "steps", "config", "scheduler"):
        assert packed[key] == solo[key], key
    assert packed["classes_seen"] == list(range(10))
    assert [h.keys() for h in packed["history"]] == [h.keys() for h in solo["history"]]
    assert packed["optimizer"]["param_groups"] == solo["optimizer"]["param_groups"]
    assert {i: {k: v.shape for k, v in slot.items()} for i, slot in packed["optimizer"]["state"].items()} == {
        i: {k: v.shape for k, v in slot.items()} for i, slot in solo["optimizer"]["state"].items()
    }
    plan = preflight(
        parse_spec(
            {
                "model": "m",
                "version": "v2",
                "arch": "small-cnn",
                "method": {"name": "fd-lm"},
                "data": {"train_limit": 768, "eval_limit": 300},
                "old": str(tmp_path / "packed-1.pt"),
                "storage": str(tmp_path / "runs"),
            }
        )
    )
    assert plan.old.classes is None and plan.spec.old == str(tmp_path / "packed-1.pt")
