"""Throughput and start-up: one GPU, the Ray pipeline, Ray Train, tune, cached and adapter teachers, the
registry's NFR matrix, the command line (docs/benchmarks/performance.md)."""
