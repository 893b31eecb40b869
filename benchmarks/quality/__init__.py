"""The defaults and `method: auto` against what a user would do instead: baselines, held-out text sets,
text-linear's optimum, the demo's promise, perturbed inputs, protected samples, LoRA adapters' flips
(docs/benchmarks/quality.md)."""
