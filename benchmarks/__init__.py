"""Benchmarks: run as `python -m benchmarks.AREA.NAME` (the fidelity benchmark: `python -m
benchmarks.fidelity`) from the repository root; each writes its section of docs/benchmarks/AREA.md
and its result files in docs/results/ (benchmarks/report.py: the pages, the folder, the tables;
benchmarks/cgroups.py: a memory cgroup for the benchmarks that run inside a limit).

- fidelity/: each method's ER and NFR against no treatment, the papers' ordering (docs/benchmarks/fidelity.md)
- quality/: the defaults and `method: auto` against what a user would do instead (quality.md)
- streaming/: the streamed data plane against in memory, and in memory cgroups (streaming.md)
- serving/: `congruent serve` and `congruent predict` under load (serving.md)
- performance/: throughput and start-up: GPU, Ray, tune, teachers, the CLI (performance.md)
- code/: the code itself: a walk of `congruent run` (docs/architecture.md), reliability
  (docs/reliability.md), the report's screenshot
"""
