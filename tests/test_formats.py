"""One reader per format (workers/data/formats/): each format is one module that both ways of reading
a dataset import — the in-memory loader and the streamed data plane (Ray Data's reading tasks and the
stream's scan) — and no other module of either tree reads a format itself."""

import ast
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parent.parent
IN_MEMORY = {"table": "workers.data.text_tables", "images": "workers.data.sources"}
STREAMED = {"table": "orchestrator.dataplane.table_tasks", "images": "orchestrator.dataplane.image_tasks"}
SCAN = {"table": "orchestrator.dataplane.table_streams", "images": "orchestrator.dataplane.image_streams"}
FORMATS = {"delimited": "table", "jsonl": "table", "parquet": "table", "image_folder": "images"}
WHOLE = ("idx", "npz")  # tensor files: read whole, never streamed (preflight refuses streaming: true on them)
FORMAT_LIBRARIES = ("pyarrow.csv", "pyarrow.json", "pyarrow.parquet", "PIL")  # what only a format module may import


@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph("workers", "orchestrator", "pipelines")


TABLES = "workers.data.formats.tables"  # the table readers by suffix


def reads_with(graph, importer: str, module: str) -> bool:
    """`importer` imports the reader `module` itself, or through the table readers by suffix."""
    direct = graph.direct_import_exists
    return direct(importer=importer, imported=module) or (
        direct(importer=importer, imported=TABLES) and direct(importer=TABLES, imported=module)
    )


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_a_streamed_format_is_one_module_both_paths_import(graph, name):
    module, kind = f"workers.data.formats.{name}", FORMATS[name]
    assert reads_with(graph, IN_MEMORY[kind], module)
    assert reads_with(graph, STREAMED[kind], module)  # Ray Data's reading tasks
    assert reads_with(graph, SCAN[kind], module)  # the stream's scan in preflight


@pytest.mark.parametrize("name", WHOLE)
def test_a_format_read_whole_is_one_module_the_loader_imports(graph, name):
    assert graph.direct_import_exists(importer=IN_MEMORY["images"], imported=f"workers.data.formats.{name}")


def test_no_module_of_either_path_reads_a_format_itself():
    """pyarrow's csv, json and parquet readers and PIL are imported, in workers/data/ and
    orchestrator/dataplane/, by the format modules alone."""
    offenders = []
    for folder in ("workers/data", "orchestrator/dataplane"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.parent.name == "formats":
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                if isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module]
                offenders += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.startswith(FORMAT_LIBRARIES)]
    assert not offenders, offenders


def test_every_table_suffix_a_spec_may_name_has_its_reader():
    from workers.data.formats.tables import READERS
    from workers.names import TEXT_FORMATS

    assert sorted(READERS) == sorted(TEXT_FORMATS)
    assert all(callable(reader.batches) and callable(reader.column) for reader in READERS.values())


def test_every_table_format_offers_the_same_functions():
    """delimited, jsonl and parquet are read through one interface (formats/tables.py `TableReader`):
    the same functions with the same parameters, and the same facts about the format."""
    import inspect

    from workers.data.formats import delimited, jsonl, parquet

    for name in ("columns", "batches", "column", "rows"):
        shapes = {
            module.__name__: list(inspect.signature(getattr(module, name)).parameters)
            for module in (delimited, jsonl, parquet)
        }
        assert len({tuple(shape) for shape in shapes.values()}) == 1, (name, shapes)
    for fact in ("TYPED", "ENCODED", "NO_ROWS", "SUFFIXES"):
        assert all(hasattr(module, fact) for module in (delimited, jsonl, parquet)), fact
