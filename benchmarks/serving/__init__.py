"""`congruent serve` with and without a shadow, and `congruent predict` on a million rows
(docs/benchmarks/serving.md)."""
