"""The spec reference, generated from the pydantic models of pipelines/spec.py.

    python -m pipelines.reference > docs/spec-reference.md

Each section is one model: its docstring, then key | type | default | allowed values | meaning,
read from the fields' annotations, defaults, constraints and descriptions. tests/test_docs.py checks
that the committed file matches this output.
"""

from __future__ import annotations

import json
import types
import typing
from typing import Any, Literal

import annotated_types
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from pipelines import spec

MODELS: tuple[type[BaseModel], ...] = (
    spec.UpdateSpec,
    spec.DataSpec,
    spec.MethodSpec,
    spec.TrainSpec,
    spec.ResourcesSpec,
    spec.WorkerResources,
    spec.StudentResources,
    spec.ReplicaResources,
    spec.PromoteSpec,
    spec.TuneSpec,
    spec.RangeSpec,
)


def _anchor(model: type[BaseModel]) -> str:
    return f"[{model.__name__}](#{model.__name__.lower()})"


def type_name(annotation: Any) -> str:
    """A reader's name for a field's type: `int`, `one of a, b`, `DataSpec`, `… or null`."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Literal:
        return "one of " + ", ".join(f"`{json.dumps(a) if isinstance(a, bool) else a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        names = [type_name(a) for a in args if a is not type(None)]
        return " or ".join(names) + (" or null" if type(None) in args else "")
    if origin in (list, tuple):
        return f"list of {type_name(args[0])}" if args else "list"
    if origin is dict:
        return f"mapping {type_name(args[0])} → {type_name(args[1])}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _anchor(annotation)
    return getattr(annotation, "__name__", str(annotation))


def constraints(metadata: list[Any]) -> str:
    """`≥ 1`, `< 1`, `at most 64 characters`, `matches ^…$` from a field's metadata."""
    words = []
    for item in metadata:
        for attr, symbol in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
            value = getattr(item, attr, None)
            if value is not None and isinstance(item, getattr(annotated_types, attr.capitalize())):
                words.append(f"{symbol} {value}")
        if isinstance(item, annotated_types.MinLen):
            words.append(f"at least {item.min_length} items")
        if isinstance(item, annotated_types.MaxLen):
            words.append(f"at most {item.max_length} characters")
        pattern = getattr(item, "pattern", None)
        if pattern:
            words.append(f"matches `{pattern}`")
    return ", ".join(words)


def default_text(field: Any) -> str:
    if field.default is PydanticUndefined:
        return "**required**"
    value = field.default
    if isinstance(value, BaseModel):
        return "see section"
    if isinstance(value, tuple):
        value = list(value)
    return f"`{json.dumps(value)}`"


def section(model: type[BaseModel]) -> str:
    doc = " ".join((model.__doc__ or "").split())
    rows = ["| key | type | default | allowed | meaning |", "|---|---|---|---|---|"]
    for name, field in model.model_fields.items():
        cells = [
            f"`{name}`",
            type_name(field.annotation),
            default_text(field),
            constraints(field.metadata),
            (field.description or "").replace("|", "\\|"),
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return f"## {model.__name__}\n\n" + (f"{doc}\n\n" if doc else "") + "\n".join(rows) + "\n"


def reference() -> str:
    head = (
        "# Spec reference\n\n"
        "Generated from the pydantic models in `pipelines/spec.py` by `python -m pipelines.reference`; "
        "do not edit by hand. A spec is one YAML mapping ([UpdateSpec](#updatespec)); unknown keys, "
        "wrong types and out-of-range values are rejected before any work starts, with one line naming "
        "the field (`congruent run` exits 2). Fractions are fractions (0.02 = 2 %), not percentages.\n"
    )
    return "\n".join([head, *(section(model) for model in MODELS)])


if __name__ == "__main__":
    print(reference(), end="")
