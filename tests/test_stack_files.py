"""The container stack's files, offline: the Dockerfiles build from the public images users pull
unless told otherwise, with the client's versions; infra/stack-test's compose override changes
images only. (infra/stack-test, `make stack-test`, builds and runs them: not part of `make test`.)"""

import re
import subprocess
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
INFRA = ROOT / "infra"


def build_args(dockerfile: str) -> dict[str, str]:
    """Each `ARG NAME=DEFAULT` of infra/DOCKERFILE (the first one of a name)."""
    found: dict[str, str] = {}
    for line in (INFRA / dockerfile).read_text().splitlines():
        if match := re.fullmatch(r"ARG (\w+)(?:=(.*))?", line.strip()):
            found.setdefault(match.group(1), match.group(2) or "")
    return found


def test_images_default_to_the_public_bases_at_the_client_versions():
    import mlflow
    import ray

    ray_args = build_args("Dockerfile.ray")
    assert ray_args["BASE"] == f"rayproject/ray:{ray.__version__}-py311-cpu"
    assert ray_args["TORCH_INDEX"] == "https://download.pytorch.org/whl/cpu" and ray_args["TORCH_WHEELS"] == ""
    assert build_args("Dockerfile.mlflow")["BASE"] == f"ghcr.io/mlflow/mlflow:v{mlflow.__version__}"
    for name in ("postgres", "s3", "aws"):  # the stand-ins of the public service images
        assert build_args(f"Dockerfile.{name}")["BASE"] == "debian:bookworm-slim"
    pins = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    torch_pins = [p for p in pins if p.startswith(("torch==", "torchvision=="))]
    ray_dockerfile = (INFRA / "Dockerfile.ray").read_text()
    assert len(torch_pins) == 2 and all(f'"{pin}"' in ray_dockerfile for pin in torch_pins)


def test_compose_pulls_public_images_and_the_stack_test_only_swaps_them():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    assert compose["postgres"]["image"] == "postgres:17"
    assert compose["s3"]["image"].startswith("chrislusf/seaweedfs:")
    assert compose["create-buckets"]["image"].startswith("amazon/aws-cli:")
    override = yaml.safe_load((INFRA / "stack-test.compose.yml").read_text())["services"]
    assert set(override) == set(compose) - {"ray-worker-gpu"}
    for name, service in override.items():
        assert set(service) == {"image"} and service["image"].startswith("localhost/congruent-"), name
    for name in ("ray", "mlflow", "postgres", "s3", "aws"):
        assert f"localhost/congruent-{name}:stack-test" in {s["image"] for s in override.values()}
        assert (INFRA / f"Dockerfile.{name}").is_file()


def test_stack_test_script_parses():
    subprocess.run(["bash", "-n", str(INFRA / "stack-test")], check=True, timeout=30)
    subprocess.run(["sh", "-n", str(INFRA / "postgres-entrypoint.sh")], check=True, timeout=30)
