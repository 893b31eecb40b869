"""Fidelity benchmark: does every update method order ER and NFR as its paper says, on real data?

`python -m benchmarks.fidelity [--quick|--full] [--seeds N] [--out docs/benchmarks/fidelity.md]`

- trainings.py: the modes and one job per model (shared across methods, cached by a settings digest)
- execute.py: the jobs as one-CPU Ray tasks, each training with `workers.tasks.bodies.train_job`
- results.py: ER / NFR / Rel-NFR / PFR tables from saved logits via `workers.metrics`
- report.py: the docs/benchmarks/fidelity.md section and the ER–NFR scatter plot
"""
