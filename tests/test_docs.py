"""The generated docs are in step with the code."""

import re
from pathlib import Path

from pipelines.reference import reference, type_name
from pipelines.spec import DataSpec, UpdateSpec

ROOT = Path(__file__).resolve().parent.parent


def test_spec_reference_is_generated_from_the_current_models():
    committed = (ROOT / "docs" / "spec-reference.md").read_text()
    assert committed == reference(), "regenerate: python -m pipelines.reference > docs/spec-reference.md"


def test_reference_names_every_field_with_its_constraints():
    text = reference()
    for model in (UpdateSpec, DataSpec):
        for name in model.model_fields:
            assert f"| `{name}` |" in text
    assert "| `train_limit` | int or null | `null` | ≥ 1 |" in text
    assert type_name(UpdateSpec.model_fields["data"].annotation) == "[DataSpec](#dataspec)"


def test_cli_reference_is_generated_from_the_current_parsers():
    from orchestrator.cli_reference import reference as cli_reference

    committed = (ROOT / "docs" / "cli-reference.md").read_text()
    assert committed == cli_reference(), "regenerate: python -m orchestrator.cli_reference > docs/cli-reference.md"
    for flag in ("`--json`", "`--out` OUT", "`--ray-address` HOST:PORT", "`--quiet`", "`--env-from-here`"):
        assert flag in committed


def without_link_targets(markdown: str) -> str:
    """`markdown` with every link's target removed: what a reader reads, wherever the links point."""
    return re.sub(r"\]\([^)]*\)", "]()", markdown)


def test_readme_is_a_front_page_that_the_sites_home_mirrors():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200, "the README is a front page: the rest belongs in docs/"
    home = (ROOT / "docs" / "index.md").read_text()
    assert without_link_targets(home) == without_link_targets(readme), (
        "docs/index.md is the README with its links relative to docs/: copy the README's change there"
    )


def test_the_readmes_pins_are_pyprojects():
    pins = re.findall(r"([a-z0-9_-]+(?:\[[a-z,]+\])?==[0-9][0-9a-z.]*)", (ROOT / "README.md").read_text())
    assert pins, "the README names the main pins"
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert [pin for pin in pins if f'"{pin}"' not in pyproject] == []
