"""Update-pipeline specs: one YAML file per model version, validated by pydantic models."""
