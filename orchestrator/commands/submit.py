"""`congruent submit SPEC.yaml --jobs-address http://HEAD:8265 [--wait]`: the same pipeline as
`congruent run`, sent to a cluster as a Ray Job (orchestrator/jobs/ray_jobs.py says what travels)."""

from __future__ import annotations

import argparse

from orchestrator.commands.options import fail_all, jobs_address


def run(args: argparse.Namespace) -> int:
    from orchestrator.driver import jobs
    from orchestrator.driver.launch import Refused

    submitted = jobs.submit(args.spec, args.jobs_address, args.env_from_here)
    if isinstance(submitted, Refused):
        return fail_all("submit", submitted.problems, submitted.code)
    print(f"submitted {submitted.model} {submitted.version} as Ray job {submitted.job_id}")
    if not args.wait:
        address = submitted.client.get_address()
        print(f"follow it with: congruent logs {submitted.job_id} --follow --jobs-address {address}")
        return 0
    info = jobs.follow(submitted)
    print(f"job {submitted.job_id}: {info.status.value}" + (f" ({info.message})" if info.message else ""))
    return 0 if info.status.value == "SUCCEEDED" else 1


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "submit", help="run an update pipeline on a Ray cluster as a Ray Job", parents=[jobs_address()]
    )
    parser.add_argument("spec", metavar="SPEC.yaml")
    parser.add_argument("--wait", action="store_true", help="stream the job's logs and exit with its outcome")
    parser.add_argument(
        "--env-from-here",
        action="store_true",
        help="send this environment's MLFLOW_TRACKING_*, MLFLOW_S3_* and AWS_* settings with the job, for a "
        "cluster that has none of its own (a bare `ray start`); a docker-compose.yml or KubeRay cluster has its own",
    )
    parser.set_defaults(func=run)
