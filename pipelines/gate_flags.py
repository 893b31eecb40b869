"""The promotion gate from a command's flags (`promote`, `serve --canary`): the one gate type,
PromoteSpec, validated by `model_validate` as a spec's `promote` is, its problems named by flag."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from pipelines.operations import PromoteSpec, gate_flag
from pipelines.spec import SpecError


def gate_from_flags(given: Mapping[str, Any]) -> PromoteSpec:
    """The gate from a command's flags (field name → value; fields left out take the type's
    defaults), validated as a spec's `promote` is; SpecError with one line per bad value,
    `--max-nfr: Input should be less than or equal to 1`, the problem worded as the spec's."""
    try:
        return PromoteSpec.model_validate(dict(given))
    except ValidationError as e:
        raise SpecError(*gate_flag_problems(e)) from None


def gate_flag_problems(error: ValidationError) -> list[str]:
    """One line per problem of a gate's validation, named by its flag."""
    lines = []
    for problem in error.errors():
        where = gate_flag(str(problem["loc"][0])) if problem["loc"] else "the gate"
        lines.append(f"{where}: {problem['msg'].removeprefix('Value error, ')}")
    return lines
