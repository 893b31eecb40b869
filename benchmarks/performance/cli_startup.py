"""How long the command line takes to answer before any work: `congruent --help` and
`congruent compare --help`, against `import torch` alone, and `congruent check` on a spec with three
problems (a text table without its text column, a num_classes below its largest label, an old
reference that names nothing), each a fresh interpreter, median of N.

    python -m benchmarks.performance.cli_startup [--repeat 7] [--out docs/benchmarks/performance.md]

The command line imports no torch, ray or mlflow until a command needs them (tests/test_layout.py
checks the imports; this measures the seconds). Targets: both helps well under 1 s; the check
under 5 s (it needs torch to read a table's labels, never Ray or MLflow here).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.report import markdown_table, page, write_section

SECTION = "## Command line: start-up"
COMMANDS = {
    "congruent --help": [sys.executable, "-m", "orchestrator", "--help"],
    "congruent compare --help": [sys.executable, "-m", "orchestrator", "compare", "--help"],
    "python -c 'import torch' (reference)": [sys.executable, "-c", "import torch"],
}


CHECKED_SPEC = """model: intents
version: v2
data: {path: intents.csv, num_classes: 3}
arch: text-bag
old: intents@champion
method: {name: kd}
"""


def seconds(argv: list[str], repeat: int, cwd: Path | None = None, code: int = 0) -> list[float]:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, timeout=120, cwd=cwd)
        times.append(time.perf_counter() - started)
        if done.returncode != code:
            raise SystemExit(f"{' '.join(argv)}: exit {done.returncode}, not {code}: {done.stderr.decode()[-500:]}")
    return times


def check_seconds(repeat: int) -> list[float]:
    """`congruent check` of CHECKED_SPEC in a folder of its own (three problems: exit 2)."""
    import os
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        Path(folder, "intents.csv").write_text("body,label\nhello there,0\ngood day,1\nbad day,5\nnice one,2\n")
        Path(folder, "v2.yaml").write_text(CHECKED_SPEC)
        argv = [sys.executable, "-m", "orchestrator", "check", "v2.yaml"]
        env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "RAY_ADDRESS")}
        times = []
        for _ in range(repeat):
            started = time.perf_counter()
            done = subprocess.run(argv, capture_output=True, timeout=120, cwd=folder, env=env)
            times.append(time.perf_counter() - started)
            assert done.returncode == 2 and len(done.stderr.decode().strip().splitlines()) == 3, done.stderr
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--out", default=page("performance"))
    args = parser.parse_args()
    seconds(COMMANDS["congruent --help"], 1)  # warm the file cache
    rows = []
    measured = {name: seconds(argv, args.repeat) for name, argv in COMMANDS.items()}
    measured["congruent check v2.yaml (three problems, exit 2)"] = check_seconds(args.repeat)
    for name, times in measured.items():
        rows.append([f"`{name}`", f"{statistics.median(times):.2f}", f"{max(times):.2f}"])
        print(f"{name}: median {statistics.median(times):.2f} s, worst {max(times):.2f} s")
    body = (
        f"Command: `python -m benchmarks.performance.cli_startup --repeat {args.repeat}`, {time.strftime('%Y-%m-%d')}, "
        f"2 CPU cores, one run; each a fresh interpreter, wall seconds.\n\n"
        + markdown_table(["command", "median s", "worst s"], rows)
        + "\n\nTargets: both helps well under 1 s (the command line imports torch, ray and mlflow only "
        "inside the command that needs them); `congruent check` of a spec with three problems (a text table "
        "without its text column, a num_classes below its largest label, an old reference that names nothing) "
        "under 5 s, its three lines printed, neither Ray nor MLflow imported (most of what remains is `import torch`)."
    )
    write_section(Path(args.out), SECTION, body)


if __name__ == "__main__":
    main()
