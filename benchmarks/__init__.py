"""Benchmarks: run as `python -m benchmarks.NAME` from the repository root; each writes its
section of docs/benchmarks.md."""
