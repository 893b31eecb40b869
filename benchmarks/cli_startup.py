"""How long the command line takes to answer before any work: `congruent --help` and
`congruent compare --help`, against `import torch` alone, each a fresh interpreter, median of N.

    python -m benchmarks.cli_startup [--repeat 7] [--out docs/benchmarks.md]

The command line imports no torch, ray or mlflow until a command needs them (tests/test_layout.py
checks the imports; this measures the seconds). Target: both helps well under 1 s.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.report import markdown_table, write_section

SECTION = "## Command line: start-up"
COMMANDS = {
    "congruent --help": [sys.executable, "-m", "orchestrator", "--help"],
    "congruent compare --help": [sys.executable, "-m", "orchestrator", "compare", "--help"],
    "python -c 'import torch' (reference)": [sys.executable, "-c", "import torch"],
}


def seconds(argv: list[str], repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True, timeout=120)
        times.append(time.perf_counter() - started)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--out", default="docs/benchmarks.md")
    args = parser.parse_args()
    seconds(COMMANDS["congruent --help"], 1)  # warm the file cache
    rows = []
    for name, argv in COMMANDS.items():
        times = seconds(argv, args.repeat)
        rows.append([f"`{name}`", f"{statistics.median(times):.2f}", f"{max(times):.2f}"])
        print(f"{name}: median {statistics.median(times):.2f} s, worst {max(times):.2f} s")
    body = (
        f"Command: `python -m benchmarks.cli_startup --repeat {args.repeat}`, {time.strftime('%Y-%m-%d')}, "
        f"2 CPU cores, one run; each a fresh interpreter, wall seconds.\n\n"
        + markdown_table(["command", "median s", "worst s"], rows)
        + "\n\nTarget: both helps well under 1 s (the command line imports torch, ray and mlflow only "
        "inside the command that needs them)."
    )
    write_section(Path(args.out), SECTION, body)


if __name__ == "__main__":
    main()
