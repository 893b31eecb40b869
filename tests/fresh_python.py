"""Code run by a new interpreter, for what a test must not do in its own process: check which
modules an import loads, start a Ray of its own, or run without a variable the suite sets."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def fresh_python(
    code: str,
    *args: str,
    cwd: Path | None = None,
    drop: Iterable[str] = (),
    extra_env: Mapping[str, str] | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess:
    """`python -c code args…` with the project importable, in `cwd` (default: the checkout), with this
    environment less the variables in `drop` plus `extra_env`; its output captured as text."""
    env = {k: v for k, v in os.environ.items() if k not in set(drop)}
    env.update({**(extra_env or {}), "PYTHONPATH": str(ROOT)})
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd or ROOT, env=env
    )
