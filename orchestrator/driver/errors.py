"""The errors a command reports as one line (`congruent CMD: error: ...`) beside those of the layers
it may import itself (`pipelines.spec.SpecError`, `workers.errors.DataError` and `Problems`): the
ones raised below the driver, named here so a command imports only the driver, the views, pipelines
and the shared errors (tests/test_layout.py). A driver flow's own error stays in its module
(`predict.PredictError`, `jobs.JobsUnreachable`)."""

from orchestrator.tracking.store import TrackingUnavailable
from orchestrator.tracking.version_refs import RegistryError

__all__ = ["RegistryError", "TrackingUnavailable"]
