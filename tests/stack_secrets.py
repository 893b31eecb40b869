"""The stack's secret rule for the servers the tests start natively (servers.py): infra/stack_setup.py's
check-secrets, loaded from its file (infra/ is not a package)."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def stack_setup():
    """infra/stack_setup.py, the stack's setup steps (infra/ is not a package)."""
    path = Path(__file__).resolve().parent.parent / "infra" / "stack_setup.py"
    spec = importlib.util.spec_from_file_location("stack_setup", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def refuse_placeholders(named: dict[str, str]) -> None:
    """The stack's own rule (stack_setup.py check-secrets) on the secrets a test server is given:
    a placeholder, short or unquotable secret stops the start before anything is spawned."""
    problems = stack_setup().check_secrets(list(named), named)
    if problems:
        raise ValueError("; ".join(problems))
