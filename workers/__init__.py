"""The numerical core: data, models, losses, metrics, the trainer and the stage bodies that Ray
workers run, as plain functions over plain records. Packages by concern, each depending only on the
ones after it: tasks/ (what a Ray task runs), teachers/, training/, models/, data/; beside them the
shared modules (names, metrics, selection, progress, storage with its two stores, stores and
s3_store, runtime, digests, percent, errors). docs/architecture.md has the table.

May import: torch, torchvision, numpy, PIL, boto3 (the S3 store, lazily) and the standard library —
never ray, mlflow, pydantic, `orchestrator` or `pipelines`. So the whole of workers/ runs on a bare
GPU machine (benchmarks/performance/gpu_throughput.py, the fidelity benchmark's `--gpu` mode). Importing
`workers` or `workers.names` imports no torch.
"""
