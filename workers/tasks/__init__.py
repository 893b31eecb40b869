"""Tasks: what one Ray task of the pipeline runs, as plain functions over plain records — the
records themselves (`records`: `TrainJob`, `TrainRecord`, …), what a job resolves to in a worker
process (`resolve`: its splits, model, teachers), the stage bodies (`bodies`: `train_job`,
`train_pack`, `eval_chunks`, `bcwi_job`) and what a training does besides learning (`bookkeeping`:
checkpoints to storage, progress, its record). The driver (orchestrator/driver/) decides where and
with which resources each runs."""
