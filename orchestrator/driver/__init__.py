"""The driver: the whole flows the commands call, each composed of planning's decisions and
execution's stages — the front door every run goes through (launch.py: prepare, then execute), an
update pipeline (pipeline.py reads top-down), method auto (auto.py: its candidates in
auto_training.py, its cross-fitting folds in auto_folds.py), the Tune search (tune.py), the demo (demo.py),
`congruent check` (check.py), jobs on a cluster (jobs.py), what `versions`, `compare`, `predict`,
`protect` and `report` gather, and the errors raised below it that commands report (errors.py).

    preflight → Plan   replicas → teacher pool → student → BCWI → evaluation   publish
    (planning/)        (execution/: Ray tasks, actors, Ray Train)              (tracking/: MLflow)

May import: ray, `workers`, `pipelines`, `orchestrator.planning`, `orchestrator.execution`,
`orchestrator.dataplane`, `orchestrator.tracking`, `orchestrator.views`, `orchestrator.host` — never
mlflow (tracking/ makes every MLflow call) or `orchestrator.commands`.
"""
