"""The promotion gate's flags, built from its one type (pipelines.operations.PromoteSpec): `promote`
and `serve --canary` take them with the type's defaults and its fields' descriptions, and parse them
with `PromoteSpec.model_validate`, so a flag and a spec's `promote` are checked by the same rules and
a bad value is refused in the same words."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence

from pipelines.operations import PromoteSpec, gate_flag


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
            gate_flag(name),
            required=required and field.is_required(),
            default=None if field.is_required() else field.default,
            metavar="N" if field.annotation in (int, int | None) else None,
            help=words.replace("%", "%%"),  # argparse formats help with %
        )


def parse_gate(args: argparse.Namespace, fields: Sequence[str]) -> PromoteSpec:
    """The gate from the flags of `fields` (those left out take the type's defaults): SpecError with
    a line per bad value, `--flag: problem` (pipelines.gate_flags.gate_from_flags)."""
    from pipelines.gate_flags import gate_from_flags  # the spec module, when a gate is parsed

    return gate_from_flags({name: getattr(args, name) for name in fields if getattr(args, name) is not None})
