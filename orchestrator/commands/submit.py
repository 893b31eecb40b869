"""`congruent submit SPEC.yaml --jobs-address http://HEAD:8265 [--wait]`: the same pipeline as
`congruent run`, sent to a cluster as a Ray Job (orchestrator/jobs/ray_jobs.py says what travels)."""

from __future__ import annotations

import argparse
from pathlib import Path

from orchestrator.commands.options import fail, jobs_address
from workers.errors import first_line


def run(args: argparse.Namespace) -> int:
    import asyncio

    from orchestrator.jobs import ray_jobs
    from pipelines.spec import SpecError, load_spec

    try:
        spec = load_spec(args.spec)
        client, job_id = ray_jobs.submit(spec, Path(args.spec), args.jobs_address, args.env_from_here)
    except SpecError as e:
        return fail("submit", str(e))
    except (ConnectionError, RuntimeError) as e:
        return fail("submit", f"cannot reach the Ray Jobs API ({first_line(e)})")
    print(f"submitted {spec.model} {spec.version} as Ray job {job_id}")
    if not args.wait:
        print(f"follow it with: congruent logs {job_id} --follow --jobs-address {client.get_address()}")
        return 0
    asyncio.run(ray_jobs.stream_logs(client, job_id))
    info = ray_jobs.wait_for_end(client, job_id)
    print(f"job {job_id}: {info.status.value}" + (f" ({info.message})" if info.message else ""))
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
