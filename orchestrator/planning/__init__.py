"""Planning: every decision about a spec that needs no Ray — preflight's checks, the `Plan` (the
workers' records: data request, training configs, objective, jobs), what the models read (model
inputs: the tokenizer, the images' normalisation, where weights start), whether the data streams and
what memory it needs, and whether the cluster's resources can hold each stage.

    preflight.py     CHECKS, in order; find(spec) → Found; preflight(spec) → Plan: every problem
                     at once, one line each
    facts/           one module per check: the facts found so far → its fact, or its problems
                     (facts/kinds.py: the facts and `Found`; no check imports another)
    plan.py          Plan (and what it holds: PlannedSplits, PlannedOld, ModelStart), train_config,
                     objective_of, cluster_demand
    model_inputs.py  the tokenizer trained, the normalisation measured, init checked
    streaming.py     data.streaming decided, a streamed source opened, what it supports
    resources.py     what a stage asks of a cluster, checked against its capacity (pure functions)

Planning opens a streamed source through the data plane (file lists, a sample, a label scan) and
resolves registry references through tracking; it starts no Ray work. May import: `workers`,
`pipelines`, `orchestrator.dataplane`, `orchestrator.tracking`, `orchestrator.host` — never ray, mlflow,
`orchestrator.execution`, `orchestrator.driver`, `orchestrator.jobs` or `orchestrator.commands`.
"""
