"""Handles between the serving applications: each served version's application by name, and a
bounded wait on a replica's answer."""

import asyncio
from typing import Any

from ray import serve
from ray.serve.handle import DeploymentHandle


def version_app_name(model: str, version: str) -> str:
    """The application that serves one version of a model as its champion (no HTTP route: the
    gateway calls it): a swap starts the new one beside the old before the gateway moves."""
    return f"congruent-{model}--v{version}"


def version_handle(model: str, version: str) -> DeploymentHandle:
    return serve.get_deployment_handle("version", app_name=version_app_name(model, version))


async def awaited(response: Any) -> Any:
    return await response


async def within(response: Any, timeout_s: float) -> Any:
    """A replica's answer, or TimeoutError after `timeout_s`: no call of the gateway waits unbounded."""
    return await asyncio.wait_for(awaited(response), timeout_s)
