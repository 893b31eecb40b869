"""`congruent logs JOB_ID --jobs-address http://HEAD:8265 [--follow]`: the logs of a submitted
pipeline job, or a stream of them until it ends."""

from __future__ import annotations

import argparse

from orchestrator.commands.options import fail, jobs_address


def run(args: argparse.Namespace) -> int:
    from orchestrator.driver import jobs

    try:
        print(jobs.job_logs(args.jobs_address, args.job_id, args.follow), end="")
    except jobs.JobsUnreachable as e:
        return fail("logs", str(e))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("logs", help="the logs of a submitted pipeline job", parents=[jobs_address()])
    parser.add_argument("job_id", help="the id `congruent submit` printed")
    parser.add_argument("--follow", action="store_true", help="stream until the job ends")
    parser.set_defaults(func=run)
