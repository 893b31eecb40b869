"""The layout's rules, checked: what each folder may import (its opening docstring says it), commands
that import no other command, a Ray- and MLflow-free numerical core, and a command line that loads
no torch, ray or mlflow before a command needs them."""

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "ray", "mlflow")


def modules_loaded_by(code: str) -> set[str]:
    """Top-level packages in sys.modules after running `code` in a fresh interpreter."""
    probe = code + "\nimport json, sys\nprint(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def imports_of(path: Path) -> set[str]:
    """Every module a source file imports (absolute names), at any depth of the file."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


@pytest.mark.parametrize("argv", [[], ["compare"], ["run"], ["versions"]])
def test_the_command_line_loads_no_torch_ray_or_mlflow_for_help(argv):
    code = (f"from orchestrator.cli import main\ntry:\n    main({argv + ['--help']!r})\nexcept SystemExit:\n    pass")
    assert not modules_loaded_by(code) & set(HEAVY)


def test_a_spec_is_validated_without_torch():
    loaded = modules_loaded_by("from pipelines.spec import parse_spec\n"
                               "parse_spec({'model': 'm', 'version': 'v', 'arch': 'resnet20'})")
    assert "torch" not in loaded and "pydantic" in loaded


def test_the_numerical_core_imports_no_ray_mlflow_pydantic_or_orchestrator():
    modules = sorted(".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
                     for p in (ROOT / "workers").rglob("*.py"))
    loaded = modules_loaded_by("\n".join(f"import {m}" for m in modules))
    assert "torch" in loaded  # the probe did import the core
    assert not loaded & {"ray", "mlflow", "pydantic", "orchestrator", "pipelines"}


def test_dependencies_point_one_way():
    """commands → driver → tracking → views; no command imports another."""
    forbidden = {
        "commands": ("orchestrator.commands.",),
        "driver": ("orchestrator.commands",),
        "tracking": ("orchestrator.commands", "orchestrator.driver"),
        "views": ("orchestrator.commands", "orchestrator.driver", "orchestrator.tracking"),
    }
    for folder, prefixes in forbidden.items():
        for path in (ROOT / "orchestrator" / folder).glob("*.py"):
            own = f"orchestrator.commands.{path.stem}"
            bad = [name for name in imports_of(path) if name.startswith(prefixes)
                   and not name.startswith((own, "orchestrator.commands.options"))
                   and not (folder == "commands" and path.stem == "__init__")]
            assert not bad, f"{path.relative_to(ROOT)} imports {bad}"
    for path in (ROOT / "workers").rglob("*.py"):
        assert not [n for n in imports_of(path) if n.split(".")[0] in ("orchestrator", "pipelines", "ray", "mlflow")]


def test_the_names_the_spec_checks_are_the_ones_the_core_builds():
    from workers import names
    from workers.models import ARCHITECTURES
    from workers.objectives import METHODS

    assert names.ARCHITECTURES == tuple(ARCHITECTURES)
    assert names.OBJECTIVES == METHODS and set(names.OBJECTIVES) < set(names.METHODS)
    assert set(names.NEEDS_OLD) < set(names.METHODS) and set(names.REPLICA_METHODS) < set(names.METHODS)


def test_every_folder_says_what_it_owns_and_may_import():
    for package in ("workers", "orchestrator", "orchestrator/commands", "orchestrator/driver",
                    "orchestrator/tracking", "orchestrator/views", "pipelines"):
        doc = ast.get_docstring(ast.parse((ROOT / package / "__init__.py").read_text()))
        assert doc and len(doc) > 60, package
        if package != "pipelines":
            assert "import" in doc.lower(), package
