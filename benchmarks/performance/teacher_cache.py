"""Teacher logits computed once: an ELODI student's wall time against a plain training of the same
model, with and without the teachers' per-sample logit cache, on text (deterministic inputs).

    python -m benchmarks.performance.teacher_cache [--samples 8000] [--epochs 4] [--m 4]
                                                   [--out docs/benchmarks/performance.md]

The same student (text-cnn on tweets, one CPU thread, in this process) trained three ways: plain
cross-entropy; ELODI from m in-process text-cnn teachers (workers.tasks.resolve.local_teachers) with the
cache off (`workers.teachers.frozen.TEACHER_CACHE = False`: the teachers run every step of every epoch);
and with it on (they run in the first epoch only). The target: ELODI ≤ 1.5× plain, with the
cache. One run, ratios from the same run (the machine is shared and noisy).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from benchmarks.report import markdown_table, page, write_section
from orchestrator.planning.plan import Plan
from orchestrator.planning.preflight import preflight
from pipelines.spec import parse_spec
from workers.tasks.bodies import train_job
from workers.teachers import frozen

SECTION = "## Teacher logits computed once (text, CPU)"


def plan_of(version: str, method: dict, samples: int, epochs: int, folder: Path) -> Plan:
    return preflight(
        parse_spec(
            {
                "model": "bench-cache",
                "version": version,
                "arch": "text-cnn",
                "data": {"dataset": "tweet-sentiment", "train_limit": samples, "eval_limit": 1000},
                "method": method,
                # SGD as when the figures in docs/benchmarks/performance.md were taken (text-cnn's default is AdamW)
                "train": {"epochs": epochs, "optimizer": "sgd", "lr": 0.1, "weight_decay": 5e-4, "batch_size": 64},
                "storage": str(folder),
                "resources": {"teacher_actors": 0},
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=8000)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--m", type=int, default=4)
    parser.add_argument("--out", default=page("performance"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        plain = plan_of("plain", {"name": "none"}, args.samples, args.epochs, folder)
        teachers = []
        for i in range(args.m):  # the teachers: plain trainings of other seeds (not timed)
            job = plain.student_job()
            job = replace(job, config=replace(job.config, seed=100 + i), checkpoint_uri=str(folder / f"t{i}.pt"))
            teachers.append(train_job(job).checkpoint)
        started = time.perf_counter()
        train_job(plain.student_job())
        seconds = {"plain": time.perf_counter() - started}
        elodi = plan_of("elodi", {"name": "elodi", "m": args.m, "k": 3}, args.samples, args.epochs, folder)
        for cached in (False, True):
            frozen.TEACHER_CACHE = cached
            job = elodi.student_job(teachers={"teacher": teachers})
            job = replace(job, checkpoint_uri=str(folder / f"elodi-{cached}.pt"))
            started = time.perf_counter()
            train_job(job)
            seconds["elodi, cache on" if cached else "elodi, cache off"] = time.perf_counter() - started
    frozen.TEACHER_CACHE = True
    for name, value in seconds.items():
        print(f"{name}: {value:.1f} s ({value / seconds['plain']:.2f}× plain)")
    table = markdown_table(
        ["training", "wall s", "× plain"],
        [[name, f"{value:.1f}", f"{value / seconds['plain']:.2f}"] for name, value in seconds.items()],
    )
    ratio = seconds["elodi, cache on"] / seconds["plain"]
    body = (
        f"Command: `python -m benchmarks.performance.teacher_cache --samples {args.samples} --epochs {args.epochs} "
        f"--m {args.m}`, {time.strftime('%Y-%m-%d')}, 2 CPU cores (one thread), one run: a text-cnn student on "
        f"{args.samples} tweets, ELODI from {args.m} in-process text-cnn teachers.\n\n{table}\n\n"
        f"With the cache the teachers run in the first epoch only: ELODI costs **{ratio:.2f}×** a plain "
        f"training (target ≤ 1.5×: {'met' if ratio <= 1.5 else 'missed'}). The pool's actors keep "
        "the same cache (workers/teachers/actor.py); images with augmentation on are never cached."
    )
    write_section(Path(args.out), SECTION, body)


if __name__ == "__main__":
    main()
