"""The layout's rules, checked: the import contracts of pyproject.toml (what each folder may import,
commands that import no other command, a Ray- and MLflow-free numerical core) hold and match what
each folder's docstring says, and a command line that loads no torch, ray or mlflow before a
command needs them (at run time, which import-linter does not see)."""

import ast
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from fresh_python import fresh_python

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "ray", "mlflow")


def modules_loaded_by(code: str) -> set[str]:
    """Top-level packages in sys.modules after running `code` in a fresh interpreter."""
    probe = code + "\nimport json, sys\nprint(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    done = fresh_python(probe, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("argv", [[], ["compare"], ["run"], ["versions"]])
def test_the_command_line_loads_no_torch_ray_or_mlflow_for_help(argv):
    code = f"from orchestrator.cli import main\ntry:\n    main({argv + ['--help']!r})\nexcept SystemExit:\n    pass"
    assert not modules_loaded_by(code) & set(HEAVY)


def test_a_spec_is_validated_without_torch():
    loaded = modules_loaded_by(
        "from pipelines.spec import parse_spec\nparse_spec({'model': 'm', 'version': 'v', 'arch': 'resnet20'})"
    )
    assert "torch" not in loaded and "pydantic" in loaded


def test_the_import_contracts_hold():
    """The layering of docs/architecture.md, as import-linter's contracts in pyproject.toml
    (`lint-imports`, also in `make lint`): a module that breaks one fails here."""
    done = subprocess.run(
        [str(Path(sys.executable).with_name("lint-imports")), "--no-cache"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "BROKEN" not in done.stdout and "KEPT" in done.stdout


def test_each_folder_says_what_its_contract_forbids():
    """A package's opening docstring names every module its import-linter contract forbids, so
    what a reader is told and what the linter checks cannot drift apart."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    forbidden = [c for c in contracts if c["type"] == "forbidden"]
    assert {m for c in forbidden for m in c["source_modules"]} >= {"workers", "pipelines"}
    for contract in forbidden:
        for package in contract["source_modules"]:
            doc = ast.get_docstring(ast.parse((ROOT / package.replace(".", "/") / "__init__.py").read_text())) or ""
            missing = [m for m in contract["forbidden_modules"] if m not in doc]
            assert not missing, f"{package}/__init__.py does not say it never imports {missing}"


def test_the_architectures_the_spec_names_are_the_ones_the_core_builds():
    from workers import names
    from workers.models.architectures import ARCHITECTURES

    assert names.ARCHITECTURES == tuple(ARCHITECTURES)


def import_circles(packages: tuple[str, ...]) -> list[list[str]]:
    """Every circle of imports among the modules of `packages` (strongly connected components of
    more than one module, Tarjan's algorithm over grimp's graph), imports inside functions and
    under TYPE_CHECKING included: a circle closed by a deferred import is still a circle."""
    import grimp

    graph = grimp.build_graph(*packages)
    modules = sorted(graph.modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(root: str) -> None:  # iterative, so a deep chain cannot overflow Python's stack
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges.get(child, []))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))

    for module in modules:
        if module not in index:
            visit(module)
    return circles


def test_import_circles_are_found():
    """The finder itself, on a circle made for it: a → b → c → a, and d outside it."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        package = Path(folder) / "circled"
        package.mkdir()
        (package / "__init__.py").write_text("")
        (package / "a.py").write_text("from circled import b\n")
        (package / "b.py").write_text("def late():\n    from circled import c\n")
        (package / "c.py").write_text("import circled.a\n")
        (package / "d.py").write_text("import circled.a\n")
        sys.path.insert(0, folder)
        try:
            assert import_circles(("circled",)) == [["circled.a", "circled.b", "circled.c"]]
        finally:
            sys.path.remove(folder)


def test_no_import_circle_in_the_project():
    """No module of orchestrator/, workers/, pipelines/ or benchmarks/ reaches itself through its
    imports (docs/architecture.md: each package imports only the ones below it)."""
    assert import_circles(("orchestrator", "workers", "pipelines", "benchmarks")) == []


def long_functions(folders: tuple[str, ...], limit: int = 60) -> list[str]:
    """`path:line name: lines` of each function of `folders` (nested ones too) spanning more than
    `limit` lines."""
    long = []
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno - node.lineno >= limit:
                    span = node.end_lineno - node.lineno + 1
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {span}")
    return long


def test_no_function_is_longer_than_60_lines():
    """The product reads as small steps (preflight's checks, one module each; a command that parses,
    calls the driver and prints): a function of orchestrator/ or workers/ that grows past 60 lines
    is split, not extended."""
    assert long_functions(("orchestrator", "workers")) == []


def test_a_long_function_is_found(tmp_path, monkeypatch):
    """The finder itself: a 61-line function is found, a 60-line one is not."""
    package = tmp_path / "pkg"
    package.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(59))
    (package / "short.py").write_text(f"def short():\n{body}\n")
    (package / "long.py").write_text(f"def long():\n{body}\n    return x0\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert long_functions(("pkg",)) == ["pkg/long.py:1 long: 61"]


COMMAND_IMPORTS = ("orchestrator.driver", "orchestrator.views", "orchestrator.commands", "pipelines", "workers.errors")


def outside_imports(path: Path, allowed: tuple[str, ...] = COMMAND_IMPORTS) -> list[str]:
    """The modules `path` imports (at module level or inside functions) that are neither the standard
    library nor under one of `allowed`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top in sys.stdlib_module_names or top == "__future__":
                continue
            if not any(name == prefix or name.startswith(prefix + ".") for prefix in allowed):
                found.append(f"{path.name}:{node.lineno} {name}")
    return found


def test_commands_import_only_the_driver_views_pipelines_and_the_shared_errors():
    """A command parses its arguments, calls the driver and prints: orchestrator/commands/* import the
    standard library, orchestrator.driver, orchestrator.views, pipelines (the spec), the commands'
    own options and the shared error types — `pipelines.spec.SpecError`, `workers.errors` (DataError,
    Problems, first_line), and those raised below the driver, named in `orchestrator.driver.errors`
    (RegistryError, TrackingUnavailable). Planning, execution, tracking, jobs, serving, ray, mlflow
    and torch are the driver's to call. (import-linter's contracts forbid; this one allows.)"""
    outside = []
    for path in sorted((ROOT / "orchestrator" / "commands").glob("*.py")):
        outside += outside_imports(path)
    assert outside == []


def test_an_import_from_outside_is_found(tmp_path):
    command = tmp_path / "command.py"
    command.write_text(
        "import argparse\nfrom orchestrator.driver import launch\nfrom workers.errors import DataError\n"
        "def run():\n    from orchestrator.tracking.store import configure\n    import torch\n"
    )
    assert outside_imports(command) == ["command.py:5 orchestrator.tracking.store", "command.py:6 torch"]


TABLE_SUFFIXES = (".csv", ".tsv", ".jsonl", ".parquet", ".json")


def suffix_dispatch(source: str) -> list[int]:
    """The lines of `source` that choose by a table suffix written out: a comparison with one
    (`suffix == ".tsv"`, `suffix in (".csv", ".tsv")`, `".parquet" != path.suffix`) or an
    `.endswith(…)` / `.removesuffix(…)` given one (alone or in a tuple, list or set)."""

    def written(node: ast.AST) -> bool:
        if isinstance(node, ast.Constant):
            return isinstance(node.value, str) and node.value.lower() in TABLE_SUFFIXES
        return isinstance(node, ast.Tuple | ast.List | ast.Set) and any(written(element) for element in node.elts)

    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(written(side) for side in (node.left, *node.comparators)):
            lines.append(node.lineno)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("endswith", "removesuffix")
            and any(written(argument) for argument in node.args)
        ):
            lines.append(node.lineno)
    return sorted(lines)


def test_suffix_dispatch_is_found():
    found = suffix_dispatch(
        'a = suffix == ".tsv"\nb = s in (".csv", ".tsv")\nc = str(p).endswith(".parquet")\n'
        'd = ".JSONL" != x\ne = READERS[".csv"]\nf = suffix in SUFFIXES\ng = p.endswith(".npz")\n'
    )
    assert found == [1, 2, 3, 4]


def test_a_table_reader_is_chosen_by_suffix_in_one_place():
    """workers/data/formats/tables.py maps a suffix to its format's reader; nowhere else in the product
    compares a suffix with ".csv", ".tsv", ".jsonl", ".parquet" or ".json" (a reader asked for what
    its format is: `TYPED`, `ENCODED`, and a name compared with a module's SUFFIXES, are not that)."""
    chosen_here = ROOT / "workers" / "data" / "formats" / "tables.py"
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for package in ("orchestrator", "workers", "pipelines", "infra")
        for path in sorted((ROOT / package).rglob("*.py"))
        if path != chosen_here
        for line in suffix_dispatch(path.read_text())
    ]
    assert not found, found


def mlflow_uses(source: str) -> list[int]:
    """The lines of `source` that import mlflow (`import mlflow…`, `from mlflow… import`) or name
    `MlflowClient`, at any depth (imports inside functions too)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "mlflow" for a in node.names):
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "mlflow":
            lines.append(node.lineno)
        elif isinstance(node, ast.Name | ast.Attribute | ast.alias) and "MlflowClient" in (
            getattr(node, "id", None),
            getattr(node, "attr", None),
            getattr(node, "name", None),
        ):
            lines.append(node.lineno)
    return sorted(set(lines))


def test_mlflow_uses_are_found():
    code = "import os\ndef f():\n    from mlflow.exceptions import E\n"
    code += "    import mlflow.pyfunc\n    return c.MlflowClient\n"
    assert mlflow_uses(code) == [3, 4, 5]
    assert mlflow_uses("import mlflowish\nfrom .mlflow import x\nMLFLOW = 'mlflow'\n") == []


def test_only_tracking_talks_to_mlflow():
    """The store behind one adapter: every MLflow call of orchestrator/, workers/ and pipelines/ is
    in orchestrator/tracking/ (a command, the driver or the serving layer calls a tracking function
    that says what it does)."""
    found = []
    for package in ("orchestrator", "workers", "pipelines"):
        for path in sorted((ROOT / package).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            if name.startswith("orchestrator/tracking/"):
                continue
            found += [f"{name}:{line}" for line in mlflow_uses(path.read_text())]
    assert not found, found


TAG_KEY_ARGUMENT = {  # a call that writes a tag: where its key is, by the number of positional arguments
    "set_tag": {2: 0, 3: 1},  # mlflow.set_tag(key, value), client.set_tag(run_id, key, value)
    "set_registered_model_tag": {3: 1},
    "set_model_version_tag": {4: 2},
    "delete_model_version_tag": {3: 2},
}


def literal_tag_keys(source: str) -> list[int]:
    """The lines of `source` that spell a tag key as a string: the key of a tag-writing call, a key
    of a dict given to `set_tags` or as `tags=`, or assigned to `tags`, or a key read from `….tags`."""

    def literal(node: ast.AST | None) -> bool:
        return isinstance(node, ast.Constant) and isinstance(node.value, str)

    def literal_keys(node: ast.AST) -> bool:
        return isinstance(node, ast.Dict) and any(literal(key) for key in node.keys)

    def of_tags(node: ast.AST) -> bool:
        return (isinstance(node, ast.Attribute) and node.attr == "tags") or (
            isinstance(node, ast.Name) and node.id == "tags"
        )

    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "attr", getattr(node.func, "id", ""))
            where = TAG_KEY_ARGUMENT.get(name, {}).get(len(node.args))
            if where is not None and literal(node.args[where]):
                lines.append(node.lineno)
            if name == "set_tags" and node.args and literal_keys(node.args[0]):
                lines.append(node.lineno)
            if name == "get" and of_tags(getattr(node.func, "value", node)) and node.args and literal(node.args[0]):
                lines.append(node.lineno)
            if any(k.arg == "tags" and literal_keys(k.value) for k in node.keywords):
                lines.append(node.lineno)
        elif isinstance(node, ast.Subscript) and of_tags(node.value) and literal(node.slice):
            lines.append(node.lineno)
        elif isinstance(node, ast.Assign) and literal_keys(node.value):
            if any(isinstance(t, ast.Name) and t.id == "tags" for t in node.targets):
                lines.append(node.lineno)
    return sorted(set(lines))


def test_literal_tag_keys_are_found():
    code = (
        "mlflow.set_tag('a', 1)\nc.set_tag(r, 'a', 1)\nset_tags({'a': 1})\nrun.data.tags.get('a')\n"
        "tags['a']\nc.create_run(e, tags={'a': 1})\ntags = {'a': 1}\nc.set_registered_model_tag(m, 'a', 1)\n"
        "mlflow.set_tag(A, 1)\nc.set_tag(r, A, 'v')\nset_tags({A: 'v'})\ntags.get(A, '')\nrow = {'a': 1}\n"
    )
    assert literal_tag_keys(code) == [1, 2, 3, 4, 5, 6, 7, 8]


def test_tag_keys_are_named_in_one_module():
    """Every MLflow tag key of orchestrator/, workers/ and pipelines/ is a name of
    orchestrator/tracking/tags.py, never a string at the call that writes or reads it."""
    found = []
    for package in ("orchestrator", "workers", "pipelines"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path != ROOT / "orchestrator" / "tracking" / "tags.py":
                found += [f"{path.relative_to(ROOT)}:{line}" for line in literal_tag_keys(path.read_text())]
    assert not found, found
