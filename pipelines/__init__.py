"""Update-pipeline specs: one YAML file per model version, validated by pydantic models.

May import: pydantic, yaml, `workers.names` and `workers.errors` (no torch inside) — never torch,
so validating a spec (and `congruent --help`) is instant.
"""
