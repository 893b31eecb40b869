"""The driver: what the commands call to do their work. It runs an update pipeline as explicit
stages on Ray (pipeline.py reads top-down), the Tune search, Ray Jobs, and gathers what `compare`
and `report` show.

    preflight (plan.py) → replicas → teacher pool → student → BCWI → evaluation → publish
    (driver process)      Ray tasks   Ray actors     Ray task   Ray task  Ray task    driver (MLflow)

Ray calls sit here, at the edge: the stage bodies are plain functions of workers/, run as Ray
tasks and actors. May import: ray, `workers`, `pipelines`, `orchestrator.tracking`,
`orchestrator.views` — never `orchestrator.commands`.
"""
