"""The generated docs are in step with the code."""

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
