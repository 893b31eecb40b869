"""Benchmark the registry's pairwise NFR matrix: V versions × N samples from class ids.

    python -m benchmarks.performance.nfr_matrix [--versions 50] [--samples 1000000] [--repeat 3]

Predictions are synthetic class ids (each version right on ~90 % of samples, errors spread at
random): the matrix's cost depends on V and N only. Target: 50 × 1 M in under 2 s. The result is
checked against a direct count for a few entries, and written to docs/benchmarks/performance.md.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from benchmarks.report import page, write_section
from workers.metrics import negative_flip_rate, nfr_matrix

SECTION = "## Registry: pairwise NFR matrix"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", type=int, default=50)
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", default=page("performance"))
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 10, args.samples)
    versions = []
    for _ in range(args.versions):
        wrong = rng.random(args.samples) < 0.1
        versions.append(np.where(wrong, (labels + rng.integers(1, 10, args.samples)) % 10, labels))
    timings = []
    for _ in range(args.repeat):
        started = time.perf_counter()
        matrix = nfr_matrix(versions, labels)
        timings.append(time.perf_counter() - started)
    for i, j in ((0, 1), (7, 3), (args.versions - 1, 0)):
        assert abs(matrix[i][j] - negative_flip_rate(versions[i], versions[j], labels)) < 1e-12
    best, worst = min(timings), max(timings)
    print(f"{args.versions} versions × {args.samples:,} samples: best {best:.2f} s, worst {worst:.2f} s")
    section = (
        f"{SECTION}\n\nCommand: `python -m benchmarks.performance.nfr_matrix --versions {args.versions} --samples "
        f"{args.samples} --repeat {args.repeat}`, {time.strftime('%Y-%m-%d')}, 2 CPU cores, one run.\n\n"
        f"{args.versions} versions × {args.samples:,} samples: **{best:.2f} s** best, {worst:.2f} s worst of "
        f"{args.repeat} (target < 2 s: {'met' if worst < 2 else 'missed'}). The matrix comes from a boolean "
        f"correct/incorrect table C (V×N): M[i][j] = (G[i][i] − G[i][j]) / N with G = C·Cᵀ accumulated in "
        f"exact float32 blocks of 65,536 samples into int64 counts; entries are "
        f"checked against direct counts.\n"
    )
    write_section(Path(args.out), SECTION, section.removeprefix(SECTION))


if __name__ == "__main__":
    main()
