"""The `congruent` commands, one module per command: each parses its arguments, calls the driver
and prints. Commands import no other command; the options they share come from options.py. Besides
the standard library a command imports only orchestrator.driver (its front door, launch.py, for
`run`, `tune`, `demo` and `submit`), orchestrator.views, pipelines and the shared errors
(workers.errors, orchestrator.driver.errors): tests/test_layout.py checks it.

Import cost matters here (`congruent --help` must be instant): at module level a command imports
only argparse, `orchestrator.commands.options` and `orchestrator.views.format`; torch, ray, mlflow
and the driver are imported inside `run`.
"""

from orchestrator.commands import (
    cancel,
    check,
    compare,
    demo,
    feedback,
    logs,
    predict,
    promote,
    protect,
    report,
    run,
    serve,
    status,
    submit,
    tune,
    versions,
)

COMMANDS = (
    compare,
    check,
    run,
    tune,
    demo,
    versions,
    promote,
    protect,
    serve,
    predict,
    feedback,
    report,
    submit,
    status,
    logs,
    cancel,
)
