"""Reliability figures: faults injected and survived, bad inputs tried and rejected cleanly.

    python -m benchmarks.code.reliability [--out docs/reliability.md]

Runs the reliability tests (tests/test_faults.py, test_mlflow_restart.py, test_bad_inputs.py, the
security tests: test_security.py, test_promotion.py, test_locks.py, test_pg_locks.py, test_confidence.py,
test_credentials.py, test_confinement.py, test_artifact_cache.py, test_ray_auth.py,
test_stack_setup.py, test_jobs.py's cancel and credentials tests, test_load.py's full load: ten
concurrent submissions, without a fault and with each fault, and the serving tests: faults, the live
gate, request limits, the replicas' secrets) with
pytest; each test appends what it injected or tried, and what happened, to a records file
(tests/reliability_records.py). The report is written from those records, so every figure in it
comes from this run. Takes 20 to 40 minutes on 2 cores, by how busy they are (the faults start two-node Ray clusters,
MLflow servers on PostgreSQL and S3); exit code is pytest's.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.report import ROOT, markdown_table, write_section

SERVING_TESTS = [
    "tests/test_serve_faults.py",
    "tests/test_live_gate.py",
    "tests/test_live_window.py",
    "tests/test_live_chain.py",
    "tests/test_serve_access.py",
    "tests/test_canary.py",
    "tests/test_stack_setup.py::test_a_fresh_env_has_three_distinct_serving_tokens_and_equal_ones_are_refused",
    "tests/test_protect.py::test_a_protected_set_that_cannot_be_read_makes_promote_refuse",
    "tests/test_serve_limits.py",
    "tests/test_serve_full_cluster.py",
    "tests/test_serve_canary.py",
    "tests/test_promotion.py::test_promote_live_needs_labelled_live_pairs_beside_the_champion_within_the_limit",
    "tests/test_promotion.py::test_promote_live_reads_only_the_sessions_the_registry_records_and_refuses_an_edited_one",
    "tests/test_serve_credentials.py",
    "tests/test_storage.py::test_a_cached_s3_checkpoint_is_used_only_while_it_is_what_the_bucket_holds",
    "tests/test_protect.py::test_from_flips_reads_the_spec_the_version_registered_not_its_run_s_edited_file",
    "tests/test_predict.py::test_predict_refuses_bad_input_in_one_line_and_writes_nothing",
    "tests/test_pyfunc.py::test_an_image_version_as_a_pyfunc_and_behind_mlflow_models_serve",
]
TESTS = [
    "tests/test_faults.py",
    "tests/test_mlflow_restart.py",
    "tests/test_bad_inputs.py",
    "tests/test_security.py",
    "tests/test_promotion.py",
    "tests/test_locks.py",
    "tests/test_pg_locks.py",
    "tests/test_confidence.py",
    "tests/test_credentials.py",
    "tests/test_confinement.py",
    "tests/test_artifact_cache.py",
    "tests/test_ray_auth.py",
    "tests/test_stack_setup.py",
    "tests/test_jobs.py::test_cancel_stops_a_submitted_pipeline_and_leaves_nothing_half_written",
    "tests/test_jobs.py::test_no_credential_reaches_mlflow_storage_logs_or_output",
    "tests/test_load.py",
]
TESTS += [t for t in SERVING_TESTS if t.split("::")[0] not in TESTS]  # a file above runs whole, once
SERVING_SECTION = "## Serving under faults"
TEMP_PATH = re.compile(r"/tmp/pytest-of-[^/]+/pytest-\d+/[^/\s:]+")  # each test's tmp_path, shown as $TMP


def run_tests(records: Path, tests: list[str] = TESTS) -> tuple[int, str]:
    """pytest over `tests` with the records file set; (exit code, its summary line)."""
    env = {**os.environ, "CONGRUENT_RELIABILITY_RECORDS": str(records), "PYTHONPATH": str(ROOT)}
    env["CONGRUENT_LOAD"] = "full"  # test_load.py: ten jobs, each fault
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    summary = next(
        (line.strip("= ") for line in reversed(lines) if " in " in line and ("passed" in line or "failed" in line)),
        "no summary",
    )
    return done.returncode, summary


def load_records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _evidence(row: dict) -> str:
    skip = {"kind", "time", "fault", "killed_pid", "survived"}
    return ", ".join(f"{k} {v}" for k, v in row.items() if k not in skip)


def faults_table(rows: list[dict]) -> list[str]:
    cells = [
        [row["fault"], str(row.get("killed_pid") or "-"), "yes" if row["survived"] else "**no**", _evidence(row)]
        for row in rows
    ]
    return markdown_table(["fault injected", "pid killed", "survived", "evidence"], cells).split("\n")


def bad_inputs_table(rows: list[dict]) -> list[str]:
    cells = []
    for row in rows:
        message = TEMP_PATH.sub("$TMP", row["stderr"]).replace("|", "\\|")
        message = message if len(message) <= 160 else message[:157] + "…"
        mark = "" if row["rejected"] else " **not clean**"
        cells.append([f"{row['name']}{mark}", row["command"], str(row["exit_code"]), f"`{message}`"])
    return markdown_table(["case", "command", "exit", "stderr (one line)"], cells).split("\n")


def _seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:.0f} s"


def load_table(rows: list[dict]) -> list[str]:
    headers = [
        "fault",
        "jobs (specs)",
        "succeeded",
        "failed → rerun ok",
        "registered",
        "lost",
        "duplicated",
        "parents as resolved",
        "NFR = compare",
        "wait p50 / p95",
        "most waiting at once",
        "wall",
    ]
    cells = []
    for row in rows:
        parents_ok = "yes" if not row["wrong_parents"] else f"**no**: {row['wrong_parents']}"
        nfr_ok = f"{row['nfr_checked'] - len(row['nfr_mismatches'])} of {row['nfr_checked']}"
        cells.append(
            [
                str(row["fault"]),
                f"{row['jobs']} ({row['specs']})",
                str(row["succeeded"]),
                f"{row['failed']} → {row['reruns_succeeded']}",
                str(row["registered"]),
                str(row["lost"]),
                str(row["duplicated"]),
                parents_ok,
                nfr_ok,
                f"{_seconds(row['wait_p50_s'])} / {_seconds(row['wait_p95_s'])}",
                str(row["most_waiting_at_once"]),
                _seconds(row["wall_s"]),
            ]
        )
    return markdown_table(headers, cells).split("\n")


def load_section(rows: list[dict]) -> list[str]:
    if not rows:
        return []
    lines = [
        "## Many pipelines at once",
        "",
        "tests/load_harness.py on a two-node Ray cluster of its own (1 CPU per node), an MLflow server on "
        "PostgreSQL with artifacts and checkpoints in SeaweedFS S3; the registry's locks are PostgreSQL advisory "
        "locks on that database (`CONGRUENT_LOCK_DSN`, orchestrator/tracking/pg_locks.py), so the PostgreSQL "
        "restart also ends every lock session. Three models; each model's v1 is registered and "
        "promoted first, then ten jobs are submitted at once with `submit --env-from-here`: per model v2 (KD from "
        "`@champion`, promoted), v3 (FD-LM from version 1) and v4 (ELODI m 2 from `@champion`, promoted; its "
        "teacher pool is a placement group), and one model's v3 spec a second time. The fault comes "
        "10 s after the first stage starts (on the worker node, for the raylet kill); a job that failed is resubmitted "
        "once. *Registered* counts specs with exactly "
        "one version; *parents as resolved*: each version's `parent_version` is its spec's fixed version, or a "
        "version that was champion while the load ran; *NFR = compare*: the registered `nfr` tag equals "
        "`congruent compare --json` on the two versions' stored ledgers. The waits are each job's time with a stage "
        "queued in Ray (`congruent status`, orchestrator/jobs/job_table.py).",
        "",
        *load_table(rows),
        "",
    ]
    for row in rows:
        if row["fault_said"] or row["failure_reasons"]:
            said = f"{row['fault']}: {row['fault_said']}" if row["fault_said"] else row["fault"]
            reasons = "; ".join(f"`{r}`" for r in row["failure_reasons"]) or "no job failed"
            lines.append(f"- {said}. Failed jobs said: {reasons}.")
    return [*lines, ""]


def security_table(rows: list[dict]) -> list[str]:
    cells = [[row["check"], "yes" if row["passed"] else "**no**", f"`{row.get('test') or '-'}`"] for row in rows]
    return markdown_table(["attack tried, and what must hold", "held", "test"], cells).split("\n")


# What the compose stack exposes (docker-compose.yml); README's "Exposure" says the same to users.
EXPOSURE = [
    "### What the compose stack exposes, and to whom",
    "",
    *markdown_table(
        ["endpoint", "published on", "who gets in"],
        [
            [
                "Ray dashboard and Jobs API (8265)",
                "`PUBLISH_HOST`, 127.0.0.1 by default",
                "holders of `RAY_AUTH_TOKEN` (`RAY_AUTH_MODE=token` on every node: 401 without it, 403 with another)",
            ],
            [
                "MLflow (5000)",
                "`PUBLISH_HOST`, 127.0.0.1 by default",
                "basic auth: the admin account (people) and the pipeline user, which is not admin (default "
                "permission READ, MANAGE on what it creates)",
            ],
            [
                "Ray GCS (6379), S3 (8333), PostgreSQL (5432)",
                "not published: the compose network only",
                "the containers; S3 keys are scoped: the Ray nodes' to s3://ray, MLflow's to s3://mlflow, admin's "
                "(buckets) to the bucket job",
            ],
        ],
    ).split("\n"),
    "",
    "Token and passwords travel in clear HTTP: to reach the stack from another machine, keep `PUBLISH_HOST=127.0.0.1` "
    "and use an SSH tunnel (`ssh -L 8265:127.0.0.1:8265 -L 5000:127.0.0.1:5000 HOST`), or set `PUBLISH_HOST` to "
    'a private address and put a TLS proxy in front of both ports (README, "Exposure"). Every Ray node holds '
    "the Ray token, the pipeline user's MLflow password and the s3://ray keys: anyone who can submit a job can "
    "read them, which is why the token is required and those credentials are the least a pipeline needs (the "
    "PostgreSQL role among them takes the registry's advisory locks and reads no table).",
]


def serving_section(rows: list[dict], security: list[dict], summary: str) -> str:
    """`congruent serve` under faults (tests/test_serve_faults.py): each fault, what it cost; then the
    serving security checks (the live gate, the request limits, the replicas' secrets)."""
    lines = [
        f"`python -m benchmarks.code.reliability --serving` ({datetime.date.today().isoformat()}, pytest {summary}): "
        "`congruent serve` with v2 shadowed beside champion v1 on the two-node cluster (0.5 CPU a version "
        "replica, one each), tracked on an MLflow server (sqlite); two clients send one image a request, "
        "each with a fresh id, while the fault is injected. Pairs lost = requests answered − pairs in the "
        "session's run after the graceful stop (the shadow's fraction is 1: every answer should have a pair).",
        "",
        *markdown_table(
            [
                "fault injected",
                "pid killed",
                "requests answered",
                "requests failed",
                "failing for",
                "pairs lost",
                "what holds",
            ],
            [
                [
                    str(row["fault"]),
                    str(row.get("killed_pid") or "-"),
                    str(row["requests_answered"]),
                    str(row["requests_failed"]),
                    f"{row.get('failing_for_s', 0)} s",
                    str(row["pairs_lost"]),
                    str(row["holds"]),
                ]
                for row in rows
            ],
        ).split("\n"),
    ]
    if security:
        lines += [
            "",
            f"**Serving security: {sum(r['passed'] for r in security)} of {len(security)} checks passed.** Each "
            "row is an attack on the endpoint or the live gate, tried by the test named, and what had to hold.",
            "",
            *security_table(security),
        ]
    return "\n".join(lines)


def report(records: list[dict], code: int, summary: str) -> str:
    faults = [r for r in records if r["kind"] == "fault"]
    bad = [r for r in records if r["kind"] == "bad_input"]
    security = [r for r in records if r["kind"] == "security"]
    environment = [r for r in records if r["kind"] == "bad_environment"]
    today = datetime.date.today().isoformat()
    lines = [
        "# Reliability",
        "",
        "Written by `python -m benchmarks.code.reliability` (20 to 40 minutes on 2 cores); rerun it to refresh. "
        f"Last run {today} on {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}: "
        f"pytest {summary} (exit {code}).",
        "",
        f"**Faults: {sum(r['survived'] for r in faults)} of {len(faults)} injected survived.** "
        f"**Bad inputs: {sum(r['rejected'] for r in bad)} of {len(bad)} rejected cleanly** "
        "(exit 2, one stderr line naming the problem, no traceback, nothing tracked or registered). "
        f"**Security checks: {sum(r['passed'] for r in security)} of {len(security)} passed.**",
        "",
        "## Faults",
        "",
        "Processes are killed by pid with SIGKILL on a real two-node Ray cluster on 127.0.0.1 (`ray start` head + "
        "worker, 1 CPU each; tests/test_faults.py) once the stage under attack has written a checkpoint; the MLflow "
        "server (sqlite backend) is killed and restarted on its port while a run logs (tests/test_mlflow_restart.py).",
        "",
        "- replica worker: Ray retries the task (`max_retries=2`) and `train_job` resumes from the epoch checkpoint "
        "(`resumed_from` > 0 in the stage record);",
        "- teacher actor: Ray restarts it (`max_restarts=2`) and replays its calls (`max_task_retries=2`); past that "
        "the pool re-sends the batch to the next actor; the student record counts deliveries per batch id;",
        "- driver: stage checkpoints are keyed by spec hash + data content fingerprint + seed, so a rerun reuses "
        "finished replicas (`epochs_run` 0) and resumes the student; a version already registered for the spec hash "
        "and eval split is reused, not duplicated; the dead driver's MLflow run is marked KILLED by the rerun;",
        "- MLflow server: the client retries with backoff 0, 2, 4, … 32 s (`MLFLOW_HTTP_REQUEST_*`, set by "
        "`orchestrator.tracking.store`), so a restart of up to a minute is survived; a version doubled by a replayed "
        "POST is reduced to one.",
        "",
        *faults_table(faults),
        "",
        "A NaN or Inf loss stops training with the step number (`NonFiniteLossError`; "
        "tests/test_trainer.py::test_non_finite_loss_stops_with_the_step_number); the pipeline's MLflow run is then "
        "FAILED and nothing is registered "
        "(tests/test_registry.py::test_tracked_run_registered_version_and_failed_run).",
        "",
    ]
    lines += load_section([r for r in records if r["kind"] == "load"])
    serving = [r for r in records if r["kind"] == "serve_fault"]
    serving_security = [r for r in records if r["kind"] == "serving_security"]
    if serving:
        lines += [SERVING_SECTION, "", serving_section(serving, serving_security, summary), ""]
    if environment:
        lines += [
            f"An unreachable tracking server: `{environment[0]['stderr']}` "
            f"after {environment[0]['seconds']} s (with `MLFLOW_HTTP_REQUEST_MAX_RETRIES=2`; the default "
            "policy gives up after about a minute), exit 1, before any Ray work.",
            "",
        ]
    lines += [
        "## Bad inputs",
        "",
        "The corpus is tests/bad_inputs.py, bad_model_inputs.py, bad_data_inputs.py and bad_text.py; each case "
        "runs the real command line (`congruent run`, `compare`, `promote`, `versions`) in a sqlite MLflow store "
        "that must be unchanged afterwards.",
        "",
        *bad_inputs_table(bad),
        "",
        "## Security",
        "",
        "Each row is an attack or a failure tried by the test named, and what had to hold.",
        "",
        *security_table(security),
        "",
        "Checkpoints load with `torch.load(weights_only=True)`, ledgers, predictions and data archives with "
        "`np.load(allow_pickle=False)`; tests/test_security.py also shows that the same payload does run when "
        "pickle is allowed, so the refusals are what protects.",
        "",
        *EXPOSURE,
        "",
    ]
    return "\n".join(lines)


HAND_WRITTEN = "\n## The container stack"  # infra/stack-test's figures: this benchmark does not run it


def kept_sections(path: Path) -> str:
    """The hand-written sections at the end of the report (from HAND_WRITTEN on), kept across reruns."""
    text = path.read_text() if path.exists() else ""
    return text[text.index(HAND_WRITTEN) :] if HAND_WRITTEN in text else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/reliability.md")
    parser.add_argument(
        "--serving", action="store_true", help=f"only {', '.join(SERVING_TESTS)}: rewrite its section alone"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        records_path = Path(tmp, "records.jsonl")
        code, summary = run_tests(records_path, SERVING_TESTS if args.serving else TESTS)
        records = load_records(records_path)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.serving:
        serving = [r for r in records if r["kind"] == "serve_fault"]
        security = [r for r in records if r["kind"] == "serving_security"]
        write_section(out, SERVING_SECTION, serving_section(serving, security, summary))
    else:
        out.write_text(report(records, code, summary) + kept_sections(out))
    print(f"{out}: {summary}")
    sys.exit(code)


if __name__ == "__main__":
    main()
