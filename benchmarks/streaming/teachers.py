"""Teachers on a stream: the ways a streamed split can feed an ELODI student's teachers, against
today's pool on data that fits, in one run (issue 33).

    python -m benchmarks.streaming.teachers [--epochs 3] [--images 12000] [--out docs/benchmarks/streaming.md]

An ELODI student (top-K of 2 frozen teachers, K 5) trains on the same train split four ways; each
pool has 2 actors of 0.5 CPU, the student's process one torch thread, on a local Ray:

- **pool, split in memory** (today's pool): the actors hold the training split (object store) and a
  request is the batch's indices and augmentation draws (`TeacherPool` + `PooledTeacher`);
- **pool, streamed batch**: the split is streamed; the student puts each batch (its uint8 samples or
  token ids, and draws) in the object store and the actors read it (what `congruent run` does with
  `teacher_actors` set on a streamed source);
- **Ray Data actor stage** (images): the teachers are a `map_batches` stage of callable-class actors
  (`concurrency` 2) between the decoding and the student; each row's augmented view is drawn from
  (seed, epoch, id) in the stage, and its top-K travel with the row. Written here only, to measure
  it: Congruent's trainer takes reference logits from a `LogitSource`, which this benchmark
  feeds from the rows (`CarriedLogits`);
- **in the student's task, streamed** (the default on a stream: `teacher_actors` left out).

Images are Fashion-MNIST PNGs with augmentation on (the teachers run every step); text is the tweets
as 8 parquet shards (no augmentation: each path keeps each sample's teacher logits once computed).
Before timing, one batch's top-K through each path are compared (values within bf16's tolerance,
classes equal). Teachers are freshly initialised: their arithmetic, not their accuracy, sets the speed.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import ray
import torch

from benchmarks.report import write_section
from benchmarks.streaming.common import machine, rates, rewrote_only, streaming_data, streaming_parser
from benchmarks.streaming.teachers_report import ACTOR_CPUS, ACTORS, HEADING, IN_TASK, PLAIN, RESULTS, K, report
from orchestrator.dataplane.image_streams import DECODE_BATCH, ImageSplit, open_image_stream
from orchestrator.dataplane.image_tasks import decode_images
from orchestrator.dataplane.ray_reading import files_dataset, tensor
from orchestrator.dataplane.table_streams import SHUFFLE_BUFFER, TableSplit, open_table_stream
from orchestrator.execution.pool import PooledTeacher, TeacherPool
from workers.data import Batch
from workers.data.augment import sample_draws
from workers.data.formats.image_folder import load_image_folder
from workers.data.input_spec import InputSpec
from workers.data.keys import TRAIN, key_hashes, key_ids, sample_ids, split_codes, text_keys
from workers.data.streamed import StreamedInputs
from workers.data.text_tables import load_tweet_sentiment
from workers.data.tokenizer import text_input
from workers.models.checkpoints import ModelSettings, load_model, save_checkpoint
from workers.runtime import use_threads
from workers.teachers.frozen import FrozenModels, LocalTeachers
from workers.training.config import TrainConfig
from workers.training.losses import TopKLogits
from workers.training.objectives import Objective
from workers.training.trainer import train


def teacher_checkpoints(settings: ModelSettings, folder: Path) -> list[str]:
    """Two frozen teachers, saved as the pool's actors load them."""
    paths = []
    for seed in (10, 11):
        model = settings.build(seed)
        for p in model.parameters():  # a zero-initialised linear model is all-equal logits: give it weights
            if p.dim() > 1 and not p.any():
                torch.nn.init.normal_(p, std=0.05)
        paths.append(str(save_checkpoint(folder / f"teacher-{seed}.pt", model, settings)))
    return paths


def pool(paths: list[str], samples: int, train_split: Any = None) -> TeacherPool:
    """ACTORS pool actors of ACTOR_CPUS each serving the teachers' top-K: by index into `train_split`,
    or (None) on the streamed batches the student sends."""
    actor = ray.remote(PooledTeacher).options(num_cpus=ACTOR_CPUS)
    streamed = train_split is None
    actors: list[Any] = [actor.remote({"teacher": paths}, 1, "cpu", streamed=streamed) for _ in range(ACTORS)]
    ray.get([a.info.remote() for a in actors])  # started and loaded before the clock runs
    return TeacherPool(actors, ("teacher",), train_split, {"teacher": K}, samples=samples)


def close(references: Any) -> None:
    if isinstance(references, TeacherPool):
        for actor in references.actors:
            ray.kill(actor)


class TeacherStage:
    """The Ray Data stage: rows of decoded images in, the same rows out with the teachers' top-K of
    each row's augmented view (its draws from (seed, epoch, id), as the trainer draws them)."""

    def __init__(self, paths: list[str], inputs: InputSpec) -> None:
        use_threads(1)
        self.teachers = FrozenModels([load_model(p)[0] for p in paths], reader=StreamedInputs(inputs))

    def __call__(self, rows: dict[str, np.ndarray], seed: int, epoch: int) -> dict[str, np.ndarray]:
        ids = torch.from_numpy(sample_ids(key_hashes(list(rows["key"]))))
        draws = sample_draws(ids, seed, epoch, 2, True, False)
        top = TopKLogits.of(self.teachers.of_streamed(Batch(ids, draws, tensor(rows["image"]))), K)
        return {**rows, "top_values": top.values.numpy(), "top_indices": top.indices.numpy()}


class CarriedLogits:
    """A reference source whose logits came with the batch's rows (`StagedImageSplit`), found by
    the batch's first sample id."""

    names = ("teacher",)

    def __init__(self) -> None:
        self.carried: dict[int, TopKLogits] = {}

    def request(self, inputs: torch.Tensor, batch: Batch | None = None) -> Any:
        assert batch is not None
        top = self.carried.pop(int(batch.indices[0]))
        return lambda: {"teacher": top}


class StagedImageSplit(ImageSplit):
    """An ImageFolder split whose epochs pass through `TeacherStage` (ACTORS actors) before the
    student; the rows' top-K go to `carried`."""

    def __init__(self, split: ImageSplit, paths: list[str], inputs: InputSpec, carried: CarriedLogits) -> None:
        super().__init__(split.root, split.files, split.labels, split.classes, split.in_channels, split.image_size)
        self.resize, self.paths, self.inputs, self.carried = split.resize, paths, inputs, carried

    def epoch(self, batch_size: int, seed: int, epoch: int, inputs: InputSpec | None = None) -> Iterator[Batch]:
        order = seed * 100_003 + epoch
        shape = {"channels": self.in_channels, "size": self.image_size, "resize": self.resize}
        files = [os.path.join(self.root, f) for f in self.files]
        decoded = files_dataset(
            files, order, decode_images, DECODE_BATCH, root=self.root, classes=self.classes, **shape
        )
        staged = decoded.map_batches(
            TeacherStage,
            batch_size=DECODE_BATCH,
            fn_constructor_kwargs={"paths": self.paths, "inputs": self.inputs},
            fn_kwargs={"seed": seed, "epoch": epoch},
            compute=ray.data.ActorPoolStrategy(size=ACTORS),
            num_cpus=ACTOR_CPUS,
        )
        for rows in staged.iter_batches(
            batch_size=batch_size,
            batch_format="numpy",
            local_shuffle_buffer_size=SHUFFLE_BUFFER * batch_size,
            local_shuffle_seed=order,
        ):
            ids = tensor(sample_ids(key_hashes(list(rows["key"]))))
            self.carried.carried[int(ids[0])] = TopKLogits(tensor(rows["top_values"]), tensor(rows["top_indices"]))
            yield Batch(ids, values=tensor(rows["image"]), labels=tensor(rows["label"]))


def agreement(answers: dict[str, TopKLogits]) -> dict[str, float]:
    """Each path's largest top-K value difference from the first path's, and the share of equal classes."""
    first = next(iter(answers.values()))
    out = {}
    for name, top in answers.items():
        out[f"{name}: max |Δ value|"] = float((top.values - first.values).abs().max())
        out[f"{name}: classes equal"] = float((top.indices.long() == first.indices.long()).float().mean())
    return out


def topk_of(references: Any, batch: Batch) -> TopKLogits:
    answer = references.request(torch.empty(0), batch)()["teacher"]
    close(references)
    return answer if isinstance(answer, TopKLogits) else TopKLogits.of(answer, K)


def run(
    data: Any, references: Any, settings: ModelSettings, config: TrainConfig, row: dict[str, str]
) -> dict[str, Any]:
    started = time.perf_counter()
    objective = Objective("none") if references is None else Objective("elodi", k=K)
    result = train(settings.build(0), data, config, objective, references, settings=settings)
    out: dict[str, Any] = {**row, **rates(result)}
    out["wall_seconds"] = time.perf_counter() - started
    if isinstance(references, TeacherPool):
        out["bytes_per_request"] = references.deliveries()["bytes_per_request"]
    close(references)
    print(out, flush=True)
    return out


def image_rows(folder: Path, models: Path, epochs: int) -> tuple[list[dict[str, Any]], dict[str, float]]:
    files = sorted(folder.rglob("*.png"))
    splits = open_image_stream(str(folder))
    assert isinstance(splits.train, ImageSplit)
    codes = split_codes(key_ids([str(p.relative_to(folder)) for p in files]), 0.1, 0.2)
    memory = load_image_folder(folder).take(torch.from_numpy(codes == TRAIN))
    assert torch.equal(memory.labels, splits.train.labels), "one membership, one order"
    inputs = InputSpec.image(1, 28)
    settings = ModelSettings("small-cnn", len(memory.classes), inputs)
    paths = teacher_checkpoints(settings, models)
    config = TrainConfig(epochs=epochs, batch_size=128, lr=0.05)  # augmentation on: shifts and flips
    held = ray.put(memory.shareable())
    n = len(splits.train)

    # one augmented batch through each path: the stream's first 128 samples are the in-memory
    # split's first 128 (one order), each with its draws from (seed 0, epoch 0, id)
    first = next(splits.train.chunks(128))
    assert first.values is not None
    draws = sample_draws(first.indices, 0, 0, 2, True, False)
    carried = CarriedLogits()
    staged = TeacherStage(paths, inputs)(
        {"key": np.array(splits.train.files[:128], dtype=object), "image": first.values.numpy()}, 0, 0
    )
    in_process = LocalTeachers(teacher=FrozenModels([load_model(p)[0] for p in paths], reader=StreamedInputs(inputs)))
    answers = {
        "pool, split in memory": topk_of(pool(paths, n, held), Batch(torch.arange(128, dtype=torch.int32), draws)),
        "pool, streamed batch": topk_of(pool(paths, n), Batch(first.indices, draws, first.values)),
        "Ray Data actor stage": TopKLogits(tensor(staged["top_values"]), tensor(staged["top_indices"])),
        "in the student's task": topk_of(in_process, Batch(first.indices, draws, first.values)),
    }
    check = agreement(answers)
    print(check, flush=True)

    row = {"data": "Fashion-MNIST PNGs (augmented)"}
    out = [run(memory, None, settings, config, {**row, "path": PLAIN[0]})]
    out.append(run(splits.train, None, settings, config, {**row, "path": PLAIN[1]}))
    out.append(run(memory, pool(paths, n, held), settings, config, {**row, "path": "pool, split in memory"}))
    out.append(run(splits.train, pool(paths, n), settings, config, {**row, "path": "pool, streamed batch"}))
    staged_split = StagedImageSplit(splits.train, paths, inputs, carried)
    out.append(run(staged_split, carried, settings, config, {**row, "path": "Ray Data actor stage"}))
    local = LocalTeachers(
        teacher=FrozenModels([load_model(p)[0] for p in paths], reader=StreamedInputs(inputs), samples=n)
    )
    out.append(run(splits.train, local, settings, config, {**row, "path": IN_TASK}))
    return out, check


def text_rows(folder: Path, models: Path, epochs: int) -> list[dict[str, Any]]:
    splits = open_table_stream(str(folder / "*.parquet"), label_column="sentiment")
    assert isinstance(splits.train, TableSplit)
    tweets = load_tweet_sentiment()
    order = [i for shard in range(8) for i in range(shard, len(tweets), 8)]  # the shards' row order
    codes = split_codes(key_ids(text_keys([tweets.texts[i] for i in order])), 0.1, 0.2)
    memory = tweets.take(torch.tensor(order)[torch.from_numpy(codes == TRAIN)])
    inputs = text_input(splits.train.tokenizer_texts(200_000), vocab_size=8000, max_length=128)
    settings = ModelSettings("text-linear", 3, inputs)
    paths = teacher_checkpoints(settings, models)
    config = TrainConfig(epochs=epochs, batch_size=64, lr=4.0, weight_decay=1e-5)
    n, row = len(splits.train), {"data": "tweets"}
    out = [run(memory, None, settings, config, {**row, "path": PLAIN[0]})]

    def fresh() -> Any:  # each streamed training opens its source: none starts with rows another one kept
        return open_table_stream(str(folder / "*.parquet"), label_column="sentiment").train

    out.append(run(fresh(), None, settings, config, {**row, "path": PLAIN[1]}))
    out += [
        run(
            memory,
            pool(paths, n, ray.put(memory.shareable())),
            settings,
            config,
            {**row, "path": "pool, split in memory"},
        )
    ]
    out.append(run(fresh(), pool(paths, n), settings, config, {**row, "path": "pool, streamed batch"}))
    local = LocalTeachers(
        teacher=FrozenModels([load_model(p)[0] for p in paths], reader=StreamedInputs(inputs), samples=n)
    )
    out.append(run(fresh(), local, settings, config, {**row, "path": IN_TASK}))
    return out


def main() -> None:
    args = streaming_parser(__doc__.splitlines()[0], RESULTS, 3).parse_args()
    if rewrote_only(args, HEADING, RESULTS, report):
        return
    with streaming_data(args.images) as (texts, images):
        models = texts.parent / "models"
        models.mkdir()
        rows, check = image_rows(images, models, args.epochs)
        rows += text_rows(texts, models, args.epochs)
    results = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine(),
        "torch": torch.__version__,
        "ray": ray.__version__,
        "epochs": args.epochs,
        "images": args.images,
        "agreement": check,
        "rows": rows,
    }
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    write_section(args.out, HEADING, report(results))


if __name__ == "__main__":
    main()
