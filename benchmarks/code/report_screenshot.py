"""docs/results/report-screenshot.png, reproducibly: a fresh `congruent demo` in a new folder, then
`congruent report` of its model, rendered by headless chromium (Debian's, as tests/test_demo.py
renders it) at 1200×2400.

    python -m benchmarks.code.report_screenshot                       # the full demo, as `make demo` runs it
    python -m benchmarks.code.report_screenshot --png /tmp/shot.png -- --epochs 1 --m 2 --train-limit 2000
                                                                 # a quick look; demo options after --
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.report import RESULTS_DIR, ROOT

MODEL = "congruent-demo"
WINDOW = "1200,2400"


def _run(command: list[str], env: dict[str, str], cwd: Path) -> None:
    print("$", " ".join(command), flush=True)
    subprocess.run(command, env=env, cwd=cwd, check=True)


def screenshot(png: Path, demo_options: list[str], keep: Path | None = None) -> Path:
    """Run the demo in a fresh folder (`keep`, else a temporary one), write its report, render it."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("report_screenshot: chromium not found (Makefile: system-services installs it)")
    with tempfile.TemporaryDirectory(prefix="congruent-shot-") as tmp:
        out = keep or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        drop = ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI", "RAY_ADDRESS")
        env = {k: v for k, v in os.environ.items() if k not in drop}
        congruent = [sys.executable, "-m", "orchestrator"]
        _run([*congruent, "demo", "--out", str(out), *demo_options], env, out)
        report = out / "report.html"
        env["MLFLOW_TRACKING_URI"] = f"sqlite:///{out / 'mlflow.db'}"
        _run([*congruent, "report", MODEL, "--out", str(report)], env, out)
        png.parent.mkdir(parents=True, exist_ok=True)
        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--window-size={WINDOW}"]
        subprocess.run(
            [chromium, *flags, f"--screenshot={png.resolve()}", report.as_uri()],
            capture_output=True,
            timeout=300,
            check=True,
        )
    print(f"wrote {png}")
    return png


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--png", type=Path, default=ROOT / RESULTS_DIR / "report-screenshot.png")
    parser.add_argument("--keep", type=Path, help="run the demo in this folder and keep it (default: a temporary one)")
    parser.add_argument("demo_options", nargs="*", help="options for `congruent demo`, after --")
    args = parser.parse_args(argv)
    screenshot(args.png, args.demo_options, args.keep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
