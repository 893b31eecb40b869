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
READERS = ("pyarrow.csv", "pyarrow.json", "pyarrow.parquet", "PIL")  # what only a format module may import


@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph("workers", "orchestrator", "pipelines")


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_a_streamed_format_is_one_module_both_paths_import(graph, name):
    module, kind = f"workers.data.formats.{name}", FORMATS[name]
    assert graph.direct_import_exists(importer=IN_MEMORY[kind], imported=module)
    assert graph.direct_import_exists(importer=STREAMED[kind], imported=module)  # Ray Data's reading tasks
    assert graph.direct_import_exists(importer=SCAN[kind], imported=module)  # the stream's scan in preflight


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
                offenders += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.startswith(READERS)]
    assert not offenders, offenders
