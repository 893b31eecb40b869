"""Every MLflow call Congruent makes: the store (embedded sqlite by default, or a server), the runs
of a pipeline (params, nested runs per stage, metrics, artifacts), the model registry (versions,
aliases, the prediction ledger, the NFR chain, the promotion gate) and what the report reads back.
A version's registry tags are written and read in one place: `version_record.VersionRecord`.

May import: mlflow, numpy, `workers` (metrics, checkpoints), `pipelines`, `orchestrator.views` (plots
it logs). Never starts Ray work; the driver calls it where stages are composed.
"""
