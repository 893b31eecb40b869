"""`arch`: a built-in architecture, `hf:DIR`, or a user factory — imported here, in the driver, so
that one that cannot be imported fails before any Ray work, not in a worker."""

from __future__ import annotations

from orchestrator.planning.facts.kinds import Architecture, Found, Problems
from workers.errors import problems_of


def check(found: Found) -> Architecture | Problems:
    from workers.models.architectures import ModelError, resolve_factory

    spec = found.settled
    try:
        resolve_factory(spec.arch, spec.allow_user_factories)
    except ModelError as e:
        return Problems.of("arch", problems_of(e))
    return Architecture(spec.arch)
