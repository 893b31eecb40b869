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


def test_no_planning_function_is_longer_than_60_lines():
    """Planning reads as small steps (preflight's checks, one module each): a function of
    orchestrator/planning/ that grows past 60 lines is split, not extended."""
    long = []
    for path in sorted((ROOT / "orchestrator" / "planning").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno - node.lineno >= 60:
                long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {node.end_lineno - node.lineno + 1}")
    assert not long, long


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
