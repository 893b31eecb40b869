"""Execution on Ray: joining or starting a cluster, the pipeline's stages as Ray tasks and Ray
Train workers, the teacher pool (Ray actors in a placement group), the evaluation's streamed
logits, and the progress the tasks send back.

    cluster.py      connect, the cluster's capacity asked, a stage body run on a node
    stages.py       replicas, student, BCWI as Ray tasks (or Ray Train when workers > 1)
    distributed.py  the Ray Train loop of a data-parallel stage
    pool.py         TeacherPool and serving_pool: teacher logits streamed to the student
    evaluation.py   the new, old and paragon models' logits on the eval split, chunk by chunk
    watch.py        StageWatch: the tasks' progress events drained into a display
    tune_stop.py    Ctrl-C during a Tune search: every trial stopped, then the driver

Ray calls sit here, at the edge: the stage bodies are plain functions of workers/. Execution reads
what planning decided (a `Plan`) and never goes back to decide again. May import: ray, `workers`,
`pipelines`, `orchestrator.planning`, `orchestrator.dataplane`, `orchestrator.tracking`,
`orchestrator.views`, `orchestrator.host` — never mlflow, `orchestrator.driver`, `orchestrator.jobs` or
`orchestrator.commands`.
"""
