"""The store: every MLflow call Congruent makes — the store itself (embedded sqlite by default, or a
server), the runs of a pipeline (params, nested runs per stage, metrics, artifacts), the model
registry (versions, aliases, the prediction ledger, the NFR chain), serving sessions' live ledgers
and protected sets — and what the report reads back. No other package imports mlflow
(tests/test_layout.py). Every tag key is named once, in tags.py; a version's registry tags are
written and read in one place: `version_record.VersionRecord`. A version is complete or invisible
(registry._publish, deferred.py); the registry's locks are leases with fencing (locks.py); registry
downloads are checked against the sha256 each version recorded (artifact_cache.py). What a version
records beyond its metrics (slice values, the registry's copy of its checkpoint, protected answers)
is computed where it is evaluated (execution/evaluation.py): tracking writes it.

May import: mlflow, numpy, `workers` (metrics, checkpoints), `pipelines`, `orchestrator.views` (plots
it logs). Never starts Ray work; the driver calls it where stages are composed.
"""
