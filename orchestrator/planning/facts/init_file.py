"""`init`: its weights can be read here, without the network (torchvision's cache, or a file), and
what names them in checkpoint keys: a weights name, or the sha256 of the file it reads (the same
path with other weights in it trains new replicas)."""

from __future__ import annotations

from orchestrator.planning.facts.kinds import Found, InitFile, Problems
from orchestrator.planning.model_inputs import check_init_available, file_digest
from pipelines.spec import SpecError
from workers.names import is_weights_file


def check(found: Found) -> InitFile | Problems:
    spec = found.settled
    try:
        check_init_available(spec)
    except SpecError as e:
        return Problems(tuple(e.problems))
    if spec.init is None or spec.init == "old":  # `init: old` is keyed by the old checkpoint's digest
        return InitFile(None)
    return InitFile(file_digest(spec.init) if is_weights_file(spec.init) else spec.init)
