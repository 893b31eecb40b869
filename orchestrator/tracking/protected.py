"""A registered model's protected samples: a regression suite every later version must keep.

The set is versioned: each `congruent protect` writes a new MLflow run in the model's experiment
(tag PROTECTED_TAG = its set version N) holding `protected/samples.parquet` — every row of set N−1
plus the new ones — and points the registered model's tag PROTECTED_RUN_TAG at it. A row is a sample
by identity: its id (workers/data/keys.py), its input (a text, or an image's path under the folder it
came from), its label (class id among the model's classes), where it came from (a file, or "flips of
vN"), and an image sample's encoded bytes (kept with the set, so the gate does not need the files).

A version's answers on the set come from its registered checkpoint (workers/models/raw_inputs.py:
what `serve` and the pyfunc answer with), so a version registered before the set is scored the
same way as one after it. The store runs no model: the caller hands in the `Scorer` (the driver's
and the serving layer's `workers.models.protected_scoring.protected_answers`); this module keeps
its answers. A protected flip is a sample the champion gets right and the candidate
wrong (counted by orchestrator/policy/protected.py); the promotion gate refuses more than
`max_protected_flips` of them.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

from orchestrator.policy.protected import protected_counts
from orchestrator.tracking.tags import PROTECTED_RUN_TAG, PROTECTED_TAG, RUN_NAME
from orchestrator.tracking.version_refs import RegistryError

SAMPLES = "protected/samples.parquet"
SCHEMA = pa.schema(
    [("id", pa.int64()), ("input", pa.string()), ("label", pa.int64()), ("origin", pa.string()), ("image", pa.binary())]
)


@dataclass(frozen=True)
class ProtectedSet:
    """The current protected set of a model: its version, run, and rows."""

    version: int
    run_id: str
    ids: np.ndarray
    inputs: list[str]
    labels: np.ndarray
    origins: list[str]
    images: list[bytes | None] | None = None  # an image model's samples' encoded files; None for texts

    def __len__(self) -> int:
        return len(self.ids)


def protected_set(model: str) -> ProtectedSet | None:
    """The model's current protected set; None when it has none (or the model does not exist).
    RegistryError, in one line, when it has one that cannot be read (the store is out of reach, the
    set's run or its samples are gone): a gate that skipped the set would fail open."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    client = MlflowClient()
    try:
        run_id = client.get_registered_model(model).tags.get(PROTECTED_RUN_TAG)
    except MlflowException as e:
        if e.error_code == "RESOURCE_DOES_NOT_EXIST":
            return None
        raise RegistryError(f"{model}: whether it has a protected set cannot be read ({_first_line(e)})") from None
    if not run_id:
        return None
    if run_id not in _SETS:  # a set's run is written once: read it once per process
        try:
            _SETS[run_id] = _read_set(run_id)
        except (MlflowException, OSError, KeyError, ValueError, pa.ArrowException) as e:
            raise RegistryError(
                f"{model}'s protected set (run {run_id}) cannot be read ({_first_line(e)}): nothing is gated without it"
            ) from None
    return _SETS[run_id]


def _first_line(error: Exception) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:200]


_SETS: dict[str, ProtectedSet] = {}  # by run id


class Scorer(Protocol):
    """A version's class id for each protected input, from its checkpoint (a local or S3 path):
    `workers.models.protected_scoring.protected_answers`, handed in by whoever gates."""

    def __call__(
        self, checkpoint: str, inputs: Sequence[str], *, images: Sequence[bytes | None] | None = None
    ) -> np.ndarray: ...


_ANSWERS: dict[tuple[str, str], np.ndarray] = {}  # (checkpoint, set run id) → its answers
KEPT_ANSWERS = 8  # answers kept per process (a gate asks for two versions, again at each retry)


def _read_set(run_id: str) -> ProtectedSet:
    from mlflow import MlflowClient

    client = MlflowClient()
    run = client.get_run(run_id)
    with tempfile.TemporaryDirectory() as folder:
        table = pq.read_table(client.download_artifacts(run_id, SAMPLES, folder))
    return ProtectedSet(
        int(run.data.tags[PROTECTED_TAG]),
        run_id,
        table.column("id").to_numpy(),
        table.column("input").to_pylist(),
        table.column("label").to_numpy(),
        table.column("origin").to_pylist(),
        table.column("image").to_pylist() if "image" in table.column_names else None,  # sets of texts before it
    )


def add_protected(
    model: str,
    ids: np.ndarray,
    inputs: list[str],
    labels: np.ndarray,
    origin: str,
    images: list[bytes] | None = None,
) -> tuple[int, int]:
    """A new set version: the current set's rows and those of `ids` it does not hold yet (a sample
    protected twice keeps its first row); `images`: an image model's samples' encoded files.
    Returns (set version, rows added). Read, extended and written under the model's registry lock
    (locks.py): two `protect` calls at once both keep their rows."""
    from orchestrator.tracking.locks import registry_lock

    with registry_lock(model, "protected") as lease:
        return _extended(model, ids, inputs, labels, origin, images, lease.check)


def _extended(
    model: str,
    ids: np.ndarray,
    inputs: list[str],
    labels: np.ndarray,
    origin: str,
    images: list[bytes] | None,
    still_held: Any,
) -> tuple[int, int]:
    from mlflow import MlflowClient

    from orchestrator.tracking.store import experiment_id

    client = MlflowClient()
    current = protected_set(model)
    held = set() if current is None else set(current.ids.tolist())
    fresh = []
    for i, sample in enumerate(ids.tolist()):
        if sample not in held:
            held.add(sample)
            fresh.append(i)
    rows: dict[str, list[Any]] = {"id": [], "input": [], "label": [], "origin": [], "image": []}
    if current is not None:
        rows = {
            "id": current.ids.tolist(),
            "input": list(current.inputs),
            "label": current.labels.tolist(),
            "origin": list(current.origins),
            "image": list(current.images) if current.images is not None else [None] * len(current),
        }
    rows["id"] += [int(ids[i]) for i in fresh]
    rows["input"] += [inputs[i] for i in fresh]
    rows["label"] += [int(labels[i]) for i in fresh]
    rows["origin"] += [origin] * len(fresh)
    rows["image"] += [images[i] for i in fresh] if images is not None else [None] * len(fresh)
    version = 1 if current is None else current.version + 1
    run = client.create_run(
        experiment_id(model),
        tags={PROTECTED_TAG: str(version), RUN_NAME: f"protected samples, set {version}"},
    )
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / Path(SAMPLES).name
        pq.write_table(pa.table(rows, schema=SCHEMA), path)
        client.log_artifact(run.info.run_id, str(path), "protected")
    client.log_metric(run.info.run_id, "protected.n", len(rows["id"]))
    client.set_terminated(run.info.run_id)
    still_held()  # fencing: no other `protect` can have moved the set meanwhile (locks.py)
    client.set_registered_model_tag(model, PROTECTED_RUN_TAG, run.info.run_id)  # the set moves only when complete
    return version, len(fresh)


def set_answers(checkpoint: str, suite: ProtectedSet, score: Scorer) -> np.ndarray:
    """`score`'s answers of a version's checkpoint (a registry copy, checked against its recorded
    sha256 when fetched) on a set, kept for the process: a canary's gate asks again after each
    feedback batch."""
    key = (checkpoint, suite.run_id)
    if key not in _ANSWERS:
        if len(_ANSWERS) >= KEPT_ANSWERS:
            _ANSWERS.pop(next(iter(_ANSWERS)))
        _ANSWERS[key] = score(checkpoint, suite.inputs, images=suite.images)
    return _ANSWERS[key]


def protected_table(
    model: str, chain: list[tuple[str, str | None]], champion: str | None, score: Scorer
) -> dict[str, Any] | None:
    """Each version of `chain` ((version, parent) pairs) on the model's protected set: n, right, and
    flipped against its parent and against `champion` (None where there is none); None without a
    set. Every version is scored by `score` from its registered checkpoint, once."""
    from orchestrator.tracking.registry import checkpoint_of
    from orchestrator.tracking.version_refs import VersionRef

    suite = protected_set(model)
    if suite is None:
        return None
    scored = {version: set_answers(checkpoint_of(VersionRef(model, version)), suite, score) for version, _ in chain}
    rows = []
    for version, parent in chain:
        vs_parent = protected_counts(suite.labels, scored[version], scored.get(parent or ""))
        vs_champion = protected_counts(
            suite.labels, scored[version], scored[champion] if champion in scored and champion != version else None
        )
        rows.append(
            {
                "version": version,
                "n": vs_parent.n,
                "correct": vs_parent.correct,
                "flipped_vs_parent": vs_parent.flipped,
                "flipped_vs_champion": vs_champion.flipped,
            }
        )
    return {"set": suite.version, "n": len(suite), "versions": rows}
