"""The streamed data plane against the in-memory one (throughput, error rates, teachers, sorted shards,
the first epoch) and updates in memory cgroups smaller than their data (docs/benchmarks/streaming.md);
common.py holds what they share (the data, the Ray that reads it, the options)."""
