"""`congruent cancel JOB_ID --jobs-address http://HEAD:8265`: stop a submitted pipeline as Ctrl-C
stops `congruent run` — its stages cancelled, its MLflow run marked KILLED, no version registered,
no partial checkpoint left (a rerun of the spec starts from its finished stages)."""

from __future__ import annotations

import argparse

from orchestrator.commands.options import fail, jobs_address


def run(args: argparse.Namespace) -> int:
    from orchestrator.driver import jobs

    try:
        cancelled = jobs.cancel(args.jobs_address, args.job_id)
    except jobs.JobsUnreachable as e:
        return fail("cancel", str(e))
    info = cancelled.info
    meta = info.metadata or {}
    what = f"{args.job_id} ({meta.get('model', '')} {meta.get('version', '')})".replace(" ()", "")
    if not cancelled.was_running:
        return fail("cancel", f"{what} had already ended: {info.status.value}; nothing to cancel", 1)
    said = [line for line in cancelled.logs.splitlines() if "interrupted:" in line]
    print(f"{what}: {info.status.value}" + (f"; the driver said: {said[-1].strip()}" if said else ""))
    return 0 if info.status.is_terminal() else 1


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "cancel", help="stop a submitted pipeline job, leaving nothing half-written", parents=[jobs_address()]
    )
    parser.add_argument("job_id", help="the id `congruent submit` printed")
    parser.set_defaults(func=run)
