"""The orchestrator: the `congruent` command line and the Ray driver behind it.

    cli.py      the parser; commands/ one module per command (parse, call the driver, print)
    driver/     the pipeline's stages on Ray, Tune, Ray Jobs, what compare and report gather
    tracking/   every MLflow call: store, runs, registry, ledger
    views/      formats, tables, progress displays, plots, the HTML report

Dependencies point one way: commands → driver → tracking → views, and all of them → workers /
pipelines. workers/ (the numerical core) never imports this package.
"""
