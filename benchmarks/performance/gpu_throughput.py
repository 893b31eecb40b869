"""Training throughput on one GPU (or, with --quick, a CPU check of the same code), samples/s:

(a) a minimal hand-written loop — data and augmentation on the device, channels-last — fp32, bf16:
    the reference;
(b) the project's trainer (workers.training.trainer.train): fp32, bf16, bf16 + torch.compile;
(c) an ELODI student distilling online from m = 4 and 8 frozen bf16 teachers on the same device
    (the in-process reference source, `resources.teacher_actors: 0`);
(d) 1, 2, 4, 8 replicas on one device: as separate processes (how replica tasks share a GPU) and
    packed into one batched model (workers/training/packed.py, `resources.replica.pack`).

    python -m benchmarks.performance.gpu_throughput [--arch resnet20] [--batch 512] [--out DIR] [--quick]

Self-contained for a bare GPU machine: torch, numpy and workers/ only (no Ray, MLflow or pydantic).
Fashion-MNIST comes from CONGRUENT_FASHION_MNIST_DIR (the four .gz files). Writes results.json and
gpu-throughput.md into --out (default $OUT, else .), to be pasted into docs/benchmarks/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
import torch.nn.functional as F

from benchmarks.report import markdown_table
from workers.data import ImageSet, batch_inputs, epoch_batches, load_splits
from workers.models.architectures import build_model
from workers.runtime import autocast, use_threads
from workers.teachers.frozen import FrozenModels, LocalTeachers
from workers.training.config import CompileMode, TrainConfig
from workers.training.objectives import Objective
from workers.training.trainer import train


@dataclass(frozen=True)
class Setup:
    arch: str
    batch: int
    train_limit: int | None
    epochs: int  # epochs per measure; the last one is timed (the first holds warm-up and compilation)
    device: str


def hand_loop(setup: Setup, precision: str) -> float:
    """A minimal loop: split on the device, gather + augment there, channels-last, SGD."""
    splits = load_splits("fashion-mnist", train_limit=setup.train_limit)
    device = torch.device(setup.device)
    use_threads(TrainConfig.threads)  # as the trainer: one thread per CPU held
    model = build_model(setup.arch, 10, seed=0).to(device, memory_format=torch.channels_last)  # type: ignore[call-overload]  # torch stubs lack (device, memory_format)
    assert isinstance(splits.train, ImageSet)
    images, labels = splits.train.images.to(device), splits.train.labels.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4)
    rate = 0.0
    for epoch in range(setup.epochs):
        _sync(device)
        started = time.perf_counter()
        for batch in epoch_batches(len(images), setup.batch, 0, epoch):
            x = batch_inputs(images, batch).contiguous(memory_format=torch.channels_last)
            with autocast(device, precision):
                logits = model(x)
            loss = F.cross_entropy(logits.float(), labels[batch.indices.to(device, torch.long)])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        _sync(device)
        rate = len(images) / (time.perf_counter() - started)
    return rate


def trainer(
    setup: Setup,
    precision: Literal["fp32", "bf16"],
    compile_mode: CompileMode = False,
    references: int = 0,
    stacked: bool = True,
) -> float:
    """The project's trainer; with `references` m > 0, an ELODI student of m frozen bf16 teachers,
    run as one vmap'd model (`stacked`, the default) or one forward per teacher."""
    splits = load_splits("fashion-mnist", train_limit=setup.train_limit)
    config = TrainConfig(
        epochs=setup.epochs,
        batch_size=setup.batch,
        lr=0.1,
        device=setup.device,
        precision=precision,
        compile=compile_mode,
        max_grad_norm=5.0,
    )
    objective, source = Objective("none"), None
    if references:
        teachers = [build_model(setup.arch, 10, seed=100 + i) for i in range(references)]
        ensemble = FrozenModels(teachers, setup.device, "bf16", stack=stacked)
        source = LocalTeachers(teacher=ensemble)
        objective = Objective("elodi", alpha=0.8, k=10)
    result = train(build_model(setup.arch, 10, seed=0), splits.train, config, objective, source)
    if references and stacked and not ensemble.stacked:  # vmap could not batch this architecture
        raise RuntimeError("the teachers fell back to one forward each")
    return result.history[-1].samples_per_second


def _replica_process(setup: Setup, seed: int, queue) -> None:
    splits = load_splits("fashion-mnist", train_limit=setup.train_limit)
    times = []
    config = TrainConfig(
        epochs=setup.epochs, batch_size=setup.batch, lr=0.1, device=setup.device, seed=seed, precision="bf16"
    )
    train(
        build_model(setup.arch, 10, seed=seed),
        splits.train,
        config,
        on_epoch=lambda stats: times.append((time.time() - stats.seconds, time.time())),
    )
    queue.put((len(splits.train), times[-1]))


def replicas_as_processes(setup: Setup, count: int) -> float:
    """`count` processes training one replica each on the device; samples/s of all of them together
    over their last epochs (time-sliced when they share a GPU)."""
    context = torch.multiprocessing.get_context("spawn")
    queue = context.Queue()
    workers = [context.Process(target=_replica_process, args=(setup, seed, queue)) for seed in range(count)]
    for worker in workers:
        worker.start()
    results = [queue.get(timeout=1800) for _ in workers]
    for worker in workers:
        worker.join()
    starts, ends = [r[1][0] for r in results], [r[1][1] for r in results]
    return sum(r[0] for r in results) / (max(ends) - min(starts))


def replicas_packed(setup: Setup, count: int, folder: Path | None = None) -> float:
    """`count` replicas as one batched model in this process (workers/training/packed.py), fp32 (what
    packed replicas train in); their checkpoints in a temporary folder."""
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="gpu-throughput-")) if folder is None else folder
    from workers.tasks.bodies import train_pack
    from workers.tasks.records import DataRequest, TrainJob

    data = DataRequest(train_limit=setup.train_limit)
    jobs = [
        TrainJob(
            f"replica-{i}",
            data,
            setup.arch,
            TrainConfig(epochs=setup.epochs, batch_size=setup.batch, lr=0.1, device=setup.device, seed=i),
            str(folder / f"pack{count}-replica-{i}.pt"),
        )
        for i in range(count)
    ]
    records = train_pack(jobs)
    n = len(load_splits("fashion-mnist", train_limit=setup.train_limit).train)
    return count * n / records[0].history[-1]["seconds"]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def profile(setup: Setup, references: int, folder: Path) -> None:
    """Where an ELODI student's step with `references` stacked bf16 teachers spends its time: one
    epoch of 10,240 images (after a warm-up epoch) under torch.profiler, the top operators by device
    time (self) to `profile-elodi-{m}.txt`; for the next step of issue 35."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as profiler

    small = Setup(setup.arch, setup.batch, 10240, 1, setup.device)
    trainer(small, "bf16", False, references)  # warm-up: allocator, cuDNN choices
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if setup.device == "cuda" else [])
    with profiler(activities=activities) as recorded:
        rate = trainer(small, "bf16", False, references)
    sort = "self_cuda_time_total" if setup.device == "cuda" else "self_cpu_time_total"
    table = recorded.key_averages().table(sort_by=sort, row_limit=30, max_name_column_width=60)
    (folder / f"profile-elodi-{references}.txt").write_text(f"{rate:,.0f} samples/s under the profiler\n{table}\n")
    print(table[:6000], flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="resnet20")
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--epochs", type=int, default=2, help="per measure; the last one is timed")
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--quick", action="store_true", help="CPU check: 2,048 images, mlp-small, 1–2 replicas")
    parser.add_argument("--skip-compile", action="store_true")
    parser.add_argument("--profile", action="store_true", help="only a profile of the ELODI student with 8 teachers")
    parser.add_argument(
        "--teachers-only", action="store_true", help="only (b) trainer bf16 and (c): the teachers' cost, in minutes"
    )
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() and not args.quick else "cpu"
    setup = Setup(
        "mlp-small" if args.quick else args.arch,
        256 if args.quick else args.batch,
        2048 if args.quick else None,
        args.epochs,
        device,
    )
    replicas = [1, 2] if args.quick else args.replicas
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    card = torch.cuda.get_device_name() if device == "cuda" else platform.processor() or platform.machine()
    results: dict = {
        "device": card,
        "torch": torch.__version__,
        "setup": setup.__dict__,
        "date": time.strftime("%Y-%m-%d"),
        "measures": {},
    }

    def measure(name: str, function, *arguments) -> None:
        started = time.perf_counter()
        try:
            value = function(*arguments)
        except Exception as e:  # noqa: BLE001 - one failed measure must not lose the others
            value = None
            results["measures"][name + " error"] = f"{type(e).__name__}: {str(e)[:300]}"
        results["measures"][name] = value
        print(
            f"{name}: {value if value is None else round(value)} samples/s ({time.perf_counter() - started:.0f} s)",
            flush=True,
        )
        (out / "results.json").write_text(json.dumps(results, indent=2))

    if args.profile:
        profile(setup, 8, out)
        return
    if not args.teachers_only:
        measure("(a) hand loop fp32", hand_loop, setup, "fp32")
        measure("(a) hand loop bf16", hand_loop, setup, "bf16")
        measure("(b) trainer fp32", trainer, setup, "fp32")
    measure("(b) trainer bf16", trainer, setup, "bf16")
    for m in (4, 8):
        measure(f"(c) ELODI student, {m} bf16 teachers", trainer, setup, "bf16", False, m)
    measure(f"(c) ELODI student, {m} bf16 teachers one at a time", trainer, setup, "bf16", False, m, False)
    for count in [] if args.teachers_only else replicas:
        measure(f"(d) {count} replicas packed", replicas_packed, setup, count)
        measure(f"(d) {count} replicas as processes", replicas_as_processes, setup, count)
    # last: compilation takes the longest, and a time limit cuts the tail
    if not args.skip_compile and not args.teachers_only:
        measure("(b) trainer bf16 compile default", trainer, setup, "bf16", True)
        measure("(b) trainer bf16 compile reduce-overhead", trainer, setup, "bf16", "reduce-overhead")
    (out / "gpu-throughput.md").write_text(markdown(results))
    print(markdown(results))


def markdown(results: dict) -> str:
    m = results["measures"]
    rows = [
        [name, "error" if value is None else f"{value:,.0f}"]
        for name, value in m.items()
        if not name.endswith(" error")
    ]

    def ratio(a: str, b: str) -> str:
        return f"{m[a] / m[b]:.2f}×" if m.get(a) and m.get(b) else "n/a"

    best_trainer = max((k for k in m if k.startswith("(b)") and m.get(k)), key=lambda k: m[k], default=None)
    best_hand = max((k for k in m if k.startswith("(a)") and m.get(k)), key=lambda k: m[k], default=None)
    packed8 = "(d) 8 replicas packed" if isinstance(m.get("(d) 8 replicas packed"), float) else None
    lines = [
        f"Device: {results['device']}, torch {results['torch']}, {results['date']}; setup {results['setup']}.",
        "",
        markdown_table(["measure", "samples/s"], rows),
        "",
        f"- best trainer / best hand loop: {ratio(best_trainer, best_hand) if best_trainer and best_hand else 'n/a'} "
        "(target ≥ 1.0×)",
        "- ELODI student with 8 teachers / trainer bf16: "
        f"{ratio('(c) ELODI student, 8 bf16 teachers', '(b) trainer bf16')} "
        "(target ≥ 0.6×)",
        "- 8 teachers in one vmap'd forward / one forward each: "
        f"{ratio('(c) ELODI student, 8 bf16 teachers', '(c) ELODI student, 8 bf16 teachers one at a time')}",
        f"- 8 replicas packed: {m.get(packed8) or 0:,.0f} samples/s in all (target ≥ 200,000)",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
