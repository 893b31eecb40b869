"""Streams across workers (issue 49): Ray Train data-parallel workers and packed replicas on a
streamed split, on real tweets in parquet shards."""

from dataclasses import replace

import torch

from test_streams import _stream_spec


def test_a_student_on_two_data_parallel_workers_trains_on_a_stream(ray_cluster, tmp_path, tweet_shards):
    """`student.workers: 2` on streamed shards (a folder named as a table by its columns): each worker
    reads the epoch's seeded stream and trains its share of every batch — the steps one worker
    takes, and a model about as good (3 points of val ER: the same SGD, DDP averaging two halves)."""
    from conftest import run_update

    folder, _ = tweet_shards
    records = {}
    for workers in (1, 2):
        spec = _stream_spec(
            tmp_path / f"w{workers}",
            folder,
            model=f"streamed-ddp-{workers}",
            version="v1",
            arch="text-linear",
            method={"name": "none"},
            train={"epochs": 2, "batch_size": 64, "seed": 5},
            resources={"student": {"cpus": 1, "workers": workers}, "teacher_actors": 0},
        )
        spec["data"] = {**spec["data"], "path": str(folder)}  # the folder itself: its columns name it a table
        result = run_update(spec, tmp_path / f"out-{workers}")
        assert result.registered_version == "1"
        records[workers] = result.student
    one, two = records[1], records[2]
    assert one.steps == two.steps > 0
    assert abs(one.val_error_rate - two.val_error_rate) <= 0.03, (one.val_error_rate, two.val_error_rate)


def test_packed_replicas_on_a_stream_train_as_each_would_alone(ray_cluster, tmp_path, tweet_shards):
    """Two text-linear replicas (with their idf) packed on streamed shards: each reads the split in its own seeded
    order (two streams in one process, each kept after its first epoch) and ends with the weights
    it reaches alone, up to float summation order."""
    from orchestrator.dataplane.table_streams import open_table_stream
    from workers.data.tokenizer import text_input
    from workers.models.checkpoints import load_model
    from workers.models.text import with_idf
    from workers.tasks.bodies import train_job, train_pack
    from workers.tasks.records import DataRequest, TrainJob
    from workers.training.config import TrainConfig

    folder, _ = tweet_shards
    streamed = open_table_stream(str(folder / "*.parquet"), label_column="sentiment")
    data = DataRequest(source=str(folder / "*.parquet"), label_column="sentiment", streaming=True, streamed=streamed)
    texts = streamed.train.tokenizer_texts(3000)
    inputs = with_idf(
        text_input(texts, vocab_size=1500, max_length=32), texts, "text-linear"
    )  # as a text-linear version's
    config = TrainConfig(epochs=2, batch_size=64, lr=0.5, augment=False)

    def replicas(prefix):
        return [
            TrainJob(
                f"replica-{i}",
                data,
                "text-linear",
                replace(config, seed=i),
                str(tmp_path / f"{prefix}{i}.pt"),
                inputs=inputs,
            )
            for i in range(2)
        ]

    packed, alone = train_pack(replicas("packed")), [train_job(job) for job in replicas("alone")]
    for p, a in zip(packed, alone):
        assert p.steps == a.steps > 0 and p.epochs_run == 2
        wp, wa = load_model(p.checkpoint)[0].state_dict(), load_model(a.checkpoint)[0].state_dict()
        assert all(torch.allclose(wp[k].float(), wa[k].float(), atol=1e-3) for k in wp)
    first, second = (load_model(r.checkpoint)[0].state_dict() for r in packed)
    assert not all(torch.equal(first[k], second[k]) for k in first)
