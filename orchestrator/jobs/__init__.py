"""The Ray Jobs client: a pipeline submitted to a cluster as a Ray Job (`congruent submit`), its
status, logs and cancellation, and the table of jobs with how long each waited for resources.

    ray_jobs.py   submit, status, logs, cancel through Ray's JobSubmissionClient
    job_table.py  `congruent status` without a job id: every job, its stages and their waits
    credentials.py  --env-from-here's settings as a file in the job's package, loaded by the
                  driver and (a worker_process_setup_hook) every worker, never in env_vars

May import: ray, `pipelines`, `workers`, `orchestrator.execution`, `orchestrator.views`,
`orchestrator.host` — never mlflow, `orchestrator.driver` or `orchestrator.commands`.
"""
