"""docs/architecture.md is in step with the code: its list of preflight's checks is preflight's, and
its package tables name exactly the packages there are."""

import pkgutil
import re
from pathlib import Path

from orchestrator.planning import facts
from orchestrator.planning.preflight import CHECKS

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "architecture.md"


def section(title: str) -> str:
    """The text of the `## title` section of the architecture page, up to the next `## ` heading."""
    text = PAGE.read_text()
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def table_rows(text: str) -> list[str]:
    """The first cell of each row of the first Markdown table in `text`, backticks removed."""
    rows = [line for line in text.splitlines() if line.startswith("|")]  # a header, its rule, the rows
    return [row.split("|")[1].strip().strip("`") for row in rows[2:]]


def subpackages(package: str) -> set[str]:
    """The packages directly under `package` (a folder of ROOT), as `name/`."""
    return {f"{info.name}/" for info in pkgutil.iter_modules([str(ROOT / package)]) if info.ispkg}


def documented_checks() -> list[str]:
    """The check names the page's "Preflight as a list of checks" paragraph gives, in its order."""
    paragraph = section("The stages of `congruent run`")
    listed = paragraph[paragraph.index("`preflight.CHECKS` is the order:") : paragraph.index("Each is a module")]
    names = re.sub(r"\([^()]*\)", "", listed.split(":", 1)[1])  # what each check does, in brackets
    return re.findall(r"`([a-z_]+)`", names)


def test_the_page_lists_preflights_checks_in_their_order():
    in_code = [check.__module__.rsplit(".", 1)[1] for check in CHECKS]
    assert documented_checks() == in_code


def test_every_fact_module_is_a_check_of_preflight():
    modules = {info.name for info in pkgutil.iter_modules(facts.__path__)}
    checks = {name for name in modules if hasattr(__import__(f"{facts.__name__}.{name}", fromlist=["check"]), "check")}
    assert checks == set(documented_checks()), "docs/architecture.md: a module of planning/facts/ is not listed"
    assert modules - checks == {"kinds"}, "a module of planning/facts/ that is not a check: say what it is"


def test_the_map_names_every_package_of_orchestrator_pipelines_and_workers():
    rows = table_rows(section("The map: each package, what it owns, what it may import"))
    packages = {row for row in rows if row.endswith("/")}
    in_code = {f"orchestrator/{name}" for name in subpackages("orchestrator")} | {"pipelines/", "workers/"}
    assert packages == in_code


def test_the_workers_table_names_every_package_of_workers():
    rows = table_rows(section("Inside workers/: packages by concern"))
    assert {row for row in rows if row.endswith("/")} == subpackages("workers")
