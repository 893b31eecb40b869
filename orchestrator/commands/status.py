"""`congruent status [JOB_ID] --jobs-address http://HEAD:8265 [--json]`: one submitted pipeline's
state, or, without JOB_ID, every job on the cluster: waiting / running / finished, and how long
each waited for resources (orchestrator/jobs/job_table.py says how that is measured)."""

from __future__ import annotations

import argparse
import datetime
import json
from dataclasses import asdict
from typing import Any

from orchestrator.commands.options import fail, jobs_address, json_option


def run(args: argparse.Namespace) -> int:
    from orchestrator.driver import jobs

    try:
        if args.job_id is None:
            return _all_jobs(args, jobs.every_job(args.jobs_address))
        info = jobs.job_info(args.jobs_address, args.job_id)
    except jobs.JobsUnreachable as e:
        return fail("status", str(e))
    meta = info.metadata or {}
    if args.json:
        print(json.dumps({"job": args.job_id, "status": info.status.value, **meta, "message": info.message or ""}))
        return 0
    print(f"{args.job_id}: {info.status.value}  {meta.get('model', '')} {meta.get('version', '')}".rstrip())
    if info.message:
        print(info.message)
    return 0


def _all_jobs(args: argparse.Namespace, rows: list[Any]) -> int:
    from orchestrator.views.tables import table

    if args.json:
        print(json.dumps([asdict(row) for row in rows], indent=2))
        return 0
    if not rows:
        print("no jobs submitted to this cluster")
        return 0
    print(
        table(
            ["job", "model", "version", "state", "waited", "ran", "submitted"],
            [
                [
                    row.job,
                    row.model,
                    row.version,
                    "finished " + row.state if row.state not in ("waiting", "running") else row.state,
                    f"{row.waited_s:.0f} s",
                    "—" if row.ran_s is None else f"{row.ran_s:.0f} s",
                    datetime.datetime.fromtimestamp(row.submitted_ms / 1000).strftime("%m-%d %H:%M:%S"),
                ]
                for row in rows
            ],
            left=4,
            indent=0,
        )
    )
    counts = {state: sum(row.state == state for row in rows) for state in ("waiting", "running")}
    finished = len(rows) - sum(counts.values())
    print(f"{counts['waiting']} waiting, {counts['running']} running, {finished} finished")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "status",
        help="the state of a submitted pipeline job, or of every job on the cluster with how long each waited",
        parents=[jobs_address(), json_option("print the job (or every job) as JSON")],
    )
    parser.add_argument("job_id", nargs="?", help="the id `congruent submit` printed (default: every job)")
    parser.set_defaults(func=run)
