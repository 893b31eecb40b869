"""The driver: the whole flows the commands call, each composed of planning's decisions and
execution's stages — an update pipeline (pipeline.py reads top-down), the Tune search (tune.py),
the demo (demo.py), `congruent check` (check.py), and what `compare` and `report` gather.

    preflight → Plan   replicas → teacher pool → student → BCWI → evaluation   publish
    (planning/)        (execution/: Ray tasks, actors, Ray Train)              (tracking/: MLflow)

May import: ray, `workers`, `pipelines`, `orchestrator.planning`, `orchestrator.execution`,
`orchestrator.dataplane`, `orchestrator.tracking`, `orchestrator.views`, `orchestrator.host` — never
mlflow (tracking/ makes every MLflow call) or `orchestrator.commands`.
"""
