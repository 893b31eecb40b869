"""The orchestrator: the `congruent` command line and the Ray driver behind it.

    cli.py       the parser; commands/ one module per command (parse, call the driver, print)
    driver/      whole flows: an update pipeline, Tune, the demo, check, what compare and report gather
    jobs/        the Ray Jobs client: submit, status, logs, cancel, the job table
    execution/   on Ray: the cluster, the stages as tasks and Ray Train workers, the teacher pool,
                 the evaluation's streamed logits, progress
    planning/    Ray-free decisions: preflight, the Plan, model inputs, streaming and memory, resources
    dataplane/   the streamed data plane: readers, streams, the kept first epoch, S3 object listing
    tracking/    every MLflow call: store, runs, registry, ledger, the version record
    policy/      the promotion gate's decision and the protected set's counts, on plain records
    views/       formats, tables, progress displays, plots, the HTML report
    host.py      what this host gives: the environment handed to workers, memory limits

Dependencies point one way, down this list (docs/architecture.md draws it; pyproject.toml's
import-linter contracts check it, and tests/test_layout.py finds no import circle), and all of them
→ workers / pipelines. workers/ (the numerical core) never imports this package.
"""
