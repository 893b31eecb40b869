"""Every MLflow call Congruent makes: the store (embedded sqlite by default, or a server), the runs
of a pipeline (params, nested runs per stage, metrics, artifacts), the model registry (versions,
aliases, the prediction ledger, the NFR chain, the promotion gate) and what the report reads back.
A version's registry tags are written and read in one place: `version_record.VersionRecord`.
A version is complete or invisible (registry._publish, deferred.py); the registry's locks are
leases with fencing (locks.py); registry downloads are checked against the sha256 each version
recorded (artifact_cache.py).

May import: mlflow, numpy, `workers` (metrics, checkpoints), `pipelines`, `orchestrator.views` (plots
it logs). Never starts Ray work; the driver calls it where stages are composed.
"""
