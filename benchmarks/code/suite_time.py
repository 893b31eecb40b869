"""How long `make test`'s pytest takes, on this machine or with its CPU cut to a quota: the suite
inside a cgroup v1 `cpu` cgroup (root only) whose CFS quota allows `--cpus` cores to every process
in it (the two pytest-xdist workers, their Ray clusters and servers), beside the seconds this
machine's CPython takes to add 20 M integers (the issue's yardstick for a machine's speed).

    python -m benchmarks.code.suite_time [--cpus 1] [--out docs/benchmarks/performance.md]

Targets (docs/benchmarks/performance.md): ≤ 25 minutes of pytest on a fresh clone of this kind of
machine, ≤ 45 with the CPU halved (`--cpus 1` on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.report import RESULTS_DIR, ROOT, markdown_table, page, write_section

SECTION = "## The test suite's time"
RESULTS = RESULTS_DIR / "suite-time-results.json"
CPU_CGROUPS = Path("/sys/fs/cgroup/cpu")
PERIOD_US = 100_000
LOOP = "import time\nt = time.time()\ns = 0\nfor i in range(20_000_000):\n    s += i\nprint(time.time() - t)"
SUITE = [
    "-m",
    "pytest",
    "-q",
    "-m",
    "not bench",
    "-n",
    "2",
    "--dist",
    "loadfile",
    "--durations=25",
    "-p",
    "no:cacheprovider",
]
TARGETS = {None: 25 * 60, 1.0: 45 * 60}  # seconds of pytest: the machine as it is, and its CPU halved


def cpu_cgroup(name: str, cpus: float | None) -> Path | None:
    """A cpu cgroup whose processes share `cpus` cores (CFS quota over a 100 ms period); None: no quota."""
    if cpus is None:
        return None
    path = CPU_CGROUPS / name
    path.mkdir(exist_ok=True)
    (path / "cpu.cfs_period_us").write_text(str(PERIOD_US))
    (path / "cpu.cfs_quota_us").write_text(str(int(cpus * PERIOD_US)))
    return path


def inside(cgroup: Path | None, argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    """`argv` run inside `cgroup` (its children too), or as it is."""
    if cgroup is not None:
        argv = ["bash", "-c", f'echo $$ > {cgroup}/cgroup.procs && exec "$@"', "bash", *argv]
    return subprocess.run(argv, cwd=ROOT, **kwargs)


def summary_line(output: str) -> str:
    """pytest's closing line: `N passed, M skipped ... in S s`."""
    lines = [line.strip("= ") for line in output.splitlines() if re.search(r"\d+ (passed|failed)", line)]
    return lines[-1] if lines else "no summary line"


def measure(cpus: float | None) -> dict:
    """The loop's seconds, then the suite's wall seconds and closing line, both inside the quota."""
    cgroup = cpu_cgroup("congruent-suite", cpus)
    try:
        loop = float(inside(cgroup, [sys.executable, "-c", LOOP], capture_output=True, text=True).stdout)
        started = time.perf_counter()
        done = inside(cgroup, [sys.executable, *SUITE], capture_output=True, text=True, env=dict(os.environ))
        seconds = time.perf_counter() - started
    finally:
        if cgroup is not None:
            for pid in (cgroup / "cgroup.procs").read_text().split():  # what the suite left behind
                subprocess.run(["kill", "-9", pid], check=False)
            cgroup.rmdir()
    print(done.stdout[-4000:], done.stderr[-2000:], sep="\n")
    return {"cpus": cpus, "cores": os.cpu_count(), "loop_s": round(loop, 2), "pytest_s": round(seconds),
            "summary": summary_line(done.stdout), "rc": done.returncode,
            "date": time.strftime("%Y-%m-%d"), "target_s": TARGETS.get(cpus)}  # fmt: skip


def section(runs: list[dict]) -> str:
    """Each recorded run: the CPU it had, the loop's seconds, pytest's, its target and its closing line."""
    rows = []
    for run in runs:
        cpu = "all" if run["cpus"] is None else f"{run['cpus']:g} of {run['cores']} (CFS quota)"
        target = run.get("target_s")
        met = "" if target is None else ("met" if run["pytest_s"] <= target and run["rc"] == 0 else "MISSED")
        rows.append(
            [run["date"], cpu, f"{run['loop_s']:.2f}", f"{run['pytest_s'] / 60:.1f}",
             "" if target is None else f"≤ {target / 60:.0f} ({met})", run["summary"]]
        )  # fmt: skip
    return (
        "`make test`'s pytest (every test but `bench`, two xdist processes), on this kind of machine "
        "and with its CPU cut by a cgroup quota; the loop is CPython adding 20 M integers, inside "
        "the same quota (`python -m benchmarks.code.suite_time [--cpus 1]`).\n\n"
        + markdown_table(["date", "CPU", "loop (s)", "pytest (min)", "target (min)", "pytest's closing line"], rows)
        + "\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cpus", type=float, default=None, help="cores the suite may use (a CFS quota); all if not given"
    )
    parser.add_argument("--out", type=Path, default=page("performance"), help="the page whose section is rewritten")
    parser.add_argument("--report", action="store_true", help="only render the section from the saved results")
    args = parser.parse_args(argv)
    path = ROOT / RESULTS
    runs = json.loads(path.read_text()) if path.exists() else []
    if not args.report:
        run = measure(args.cpus)
        runs = [r for r in runs if r["cpus"] != run["cpus"]] + [run]
        path.write_text(json.dumps(runs, indent=2) + "\n")
    write_section(ROOT / args.out, SECTION, section(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
