"""The promotion gate's flags, built from its one type (pipelines.operations.PromoteSpec): `promote`
and `serve --canary` take them with the type's defaults and its fields' descriptions, and parse them
with `PromoteSpec.model_validate`, so a flag and a spec's `promote` are checked by the same rules and
a bad value is refused in the same words."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence

from pydantic import ValidationError

from pipelines.operations import PromoteSpec


def flag(field: str) -> str:
    """A gate field's flag: max_nfr → --max-nfr."""
    return "--" + field.replace("_", "-")


def add_gate_flags(
    parser: argparse.ArgumentParser,
    fields: Sequence[str],
    helps: Mapping[str, str] | None = None,
    required: bool = True,
) -> None:
    """One flag per gate field of `fields`, its default the field's; `helps`: a command's own words
    for a flag (else the field's description); `required`: a field without a default is a required
    flag (False: the command asks for it only when it gates)."""
    for name in fields:
        field = PromoteSpec.model_fields[name]
        words = (helps or {}).get(name) or field.description or ""
        parser.add_argument(
            flag(name),
            required=required and field.is_required(),
            default=None if field.is_required() else field.default,
            metavar="N" if field.annotation in (int, int | None) else None,
            help=words.replace("%", "%%"),  # argparse formats help with %
        )


def parse_gate(args: argparse.Namespace, fields: Sequence[str]) -> PromoteSpec:
    """The gate from the flags of `fields` (those left out take the type's defaults); SpecError with
    a line per bad value, `--flag: problem`, the problem worded as a spec's `promote.field: problem`."""
    from pipelines.spec import SpecError

    given = {name: getattr(args, name) for name in fields if getattr(args, name) is not None}
    try:
        return PromoteSpec.model_validate(given)
    except ValidationError as e:
        raise SpecError(*gate_problems(e)) from None


def gate_problems(error: ValidationError) -> list[str]:
    """`--max-nfr: Input should be less than or equal to 1`: one line per problem, as the spec words it."""
    lines = []
    for problem in error.errors():
        where = flag(str(problem["loc"][0])) if problem["loc"] else "the gate"
        lines.append(f"{where}: {problem['msg'].removeprefix('Value error, ')}")
    return lines
