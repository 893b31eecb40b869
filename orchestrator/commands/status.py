"""`congruent status JOB_ID --jobs-address http://HEAD:8265`: the state of a submitted pipeline job."""

from __future__ import annotations

import argparse

from orchestrator.commands.options import fail, jobs_address


def run(args: argparse.Namespace) -> int:
    from orchestrator.driver import ray_jobs
    from pipelines.spec import SpecError

    try:
        info = ray_jobs.client(args.jobs_address).get_job_info(args.job_id)
    except (SpecError, RuntimeError, ConnectionError) as e:
        return fail("status", str(e))
    meta = info.metadata or {}
    print(f"{args.job_id}: {info.status.value}  {meta.get('model', '')} {meta.get('version', '')}".rstrip())
    if info.message:
        print(info.message)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("status", help="the status of a submitted pipeline job", parents=[jobs_address()])
    parser.add_argument("job_id", help="the id `congruent submit` printed")
    parser.set_defaults(func=run)
