"""The shipped example specs stay valid."""

from pathlib import Path

import pytest

from pipelines.spec import load_spec

EXAMPLES = sorted(Path(__file__).resolve().parent.parent.joinpath("pipelines", "examples").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_spec_is_valid(path):
    assert load_spec(path).model
