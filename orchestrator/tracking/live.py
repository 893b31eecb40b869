"""The live ledger: what a served champion and its shadowed candidate answered on real requests, and
the labels that arrive later (`congruent serve`, orchestrator/serving/).

A serving session with a shadow is an MLflow run of its own in the model's experiment, tagged
LIVE_TAG, CHAMPION_TAG and CANDIDATE_TAG. Its artifacts hold parquet chunks, each written once:

- `live/pairs/*.parquet` (PAIR_SCHEMA): one row per shadowed sample: its request id, a digest of its
  input, when it was answered, each version's class and probability;
- `live/labels/*.parquet` (LABEL_SCHEMA): a request id and its label, as feedback gave them.

Either side of a session reads as prediction rows by sample id (`live_predictions`), which
`congruent compare live:RUN/champion live:RUN/candidate` (or beside `congruent predict` files and
ledgers) compares by id.

Figures join the two by request id and count globally, each id once: of several pairs of one id (a
sample sent again, or rows the gateway resent after a lost reply) the latest counts, as the latest
label of an id does:
the disagreement rate of the two versions' classes over every pair, known at once and without
labels; over the labelled pairs, each version's ER, the NFR (champion right, candidate wrong) and
the PFR, each k of n with its Wilson bound (workers/confidence.py). They are counted as rows come, in
bounded memory: live_window.py keeps the last ids and running totals over all of them.
"""

from __future__ import annotations

import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from orchestrator.tracking.live_chain import LiveChainError, chain_step, checked_chain
from orchestrator.tracking.live_sessions import bind_session, bound_sessions
from orchestrator.tracking.live_window import LiveCounts, LiveWindow, replay
from orchestrator.tracking.tags import (
    CANARY_TAG,
    CANDIDATE_TAG,
    CHAIN_TAG,
    CHAMPION_TAG,
    LIVE_TAG,
    MAX_IDS_PER_CLIENT_TAG,
    MAX_IDS_TAG,
    OUTCOME_TAG,
    RUN_NAME,
)
from workers.digests import file_sha256

Kind = Literal["pairs", "labels"]


def _schemas() -> dict[str, Any]:
    import pyarrow as pa  # type: ignore[import-untyped]

    pairs = pa.schema(
        [
            ("id", pa.string()),
            ("digest", pa.string()),
            ("time", pa.float64()),
            ("champion_class", pa.int64()),
            ("champion_probability", pa.float64()),
            ("candidate_class", pa.int64()),
            ("candidate_probability", pa.float64()),
            ("client", pa.string()),  # a digest of the peer that sent it (none in chunks written before)
        ]
    )
    labels = pa.schema([("id", pa.string()), ("label", pa.int64()), ("time", pa.float64())])
    return {"pairs": pairs, "labels": labels}


def write_chunk(run_id: str, kind: Kind, rows: Sequence[Mapping[str, Any]]) -> str:
    """`rows` as one parquet chunk `live/<kind>/chunk-<ns>-<random>.parquet` of the run, the run's
    chain (CHAIN_TAG, live_chain.py) moved over it; its name. One writer per session: its ledger."""
    import pyarrow as pa
    import pyarrow.parquet as pq  # type: ignore[import-untyped]
    from mlflow import MlflowClient

    schema = _schemas()[kind]
    optional = ("client",)  # a pair sent without a peer (a test's, a replay's) has none
    picked = [{name: row.get(name) if name in optional else row[name] for name in schema.names} for row in rows]
    table = pa.Table.from_pylist(picked, schema=schema)
    name = f"chunk-{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.parquet"
    client = MlflowClient()
    held, _, head = (client.get_run(run_id).data.tags.get(CHAIN_TAG) or "0:").partition(":")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        pq.write_table(table, path)
        digest = file_sha256(str(path))
        client.log_artifact(run_id, str(path), f"live/{kind}")
    client.set_tag(run_id, CHAIN_TAG, f"{int(held) + 1}:{chain_step(head, f'{kind}/{name}', digest)}")
    return name


def chunks(run_id: str, adopt_last: bool = False) -> Iterator[tuple[Kind, list[dict[str, Any]]]]:
    """The run's chunks, pairs and labels alike, in the order they were written (their names begin
    with the time they were written at), each as (kind, rows): downloaded to a temporary folder,
    checked against the run's chain (live_chain.py: LiveChainError before any is yielded when they
    are not the ones its ledger wrote; `adopt_last`: the ledger's own replay), read one at a time."""
    import pyarrow.parquet as pq
    from mlflow import MlflowClient, artifacts

    client = MlflowClient()
    kinds: tuple[Kind, ...] = ("pairs", "labels")
    with tempfile.TemporaryDirectory() as folder:
        found: list[tuple[str, Kind, Path]] = []
        for kind in kinds:
            if not client.list_artifacts(run_id, f"live/{kind}"):
                continue
            local = Path(artifacts.download_artifacts(run_id=run_id, artifact_path=f"live/{kind}", dst_path=folder))
            found += [(path.name, kind, path) for path in local.glob("*.parquet")]
        found.sort(key=lambda chunk: (chunk[0], chunk[1] == "labels"))
        written = [(f"{kind}/{name}", file_sha256(str(path))) for name, kind, path in found]
        healed = checked_chain(run_id, client.get_run(run_id).data.tags.get(CHAIN_TAG), written, adopt_last)
        if healed is not None:
            client.set_tag(run_id, CHAIN_TAG, healed)
        for _, kind, path in found:
            yield kind, pq.read_table(path, schema=_schemas()[kind]).to_pylist()


LIVE_SIDES = ("champion", "candidate")


def live_predictions(run_id: str, side: str) -> dict[str, Any]:
    """One side (`champion` or `candidate`) of a serving session's ledger as prediction rows by
    sample id (the arrays workers/prediction_files.py `read_predictions` gives): each request id's
    latest pair and latest label (−1: none came), all of the session's ids (no window). A request id
    is a sample's key (workers/data/keys.py `key_ids` of it, stripped): clients that send their
    data's id column as request ids meet `congruent predict --id-column` files sample by sample."""
    from workers.data.keys import key_ids

    if side not in LIVE_SIDES:
        raise ValueError(f"a live ledger has sides {' and '.join(LIVE_SIDES)}, not {side!r}")
    answers: dict[str, int] = {}
    labels: dict[str, int] = {}
    for kind, rows in chunks(run_id):
        if kind == "pairs":
            answers |= {row["id"]: int(row[f"{side}_class"]) for row in rows}
        else:
            labels |= {row["id"]: int(row["label"]) for row in rows}
    ids = list(answers)
    return {
        "ids": key_ids([i.strip() for i in ids]),
        "labels": np.array([labels.get(i, -1) for i in ids], dtype=np.int64),
        "class_ids": np.array([answers[i] for i in ids], dtype=np.int64),
        "known_classes": None,
        "fingerprint": "",
        "positional": False,
    }


def live_counts(champion: np.ndarray, candidate: np.ndarray, labels: np.ndarray) -> LiveCounts:
    """The counts of pairs whose classes are `champion` and `candidate`, `labels` −1 where none came."""
    champion, candidate, labels = (np.asarray(a, dtype=np.int64) for a in (champion, candidate, labels))
    known = labels >= 0
    right_before, right_after = champion[known] == labels[known], candidate[known] == labels[known]
    return LiveCounts(
        pairs=len(champion),
        disagreements=int((champion != candidate).sum()),
        labelled=int(known.sum()),
        champion_errors=int((~right_before).sum()),
        candidate_errors=int((~right_after).sum()),
        negative_flips=int((right_before & ~right_after).sum()),
        positive_flips=int((~right_before & right_after).sum()),
    )


def run_counts(run_id: str) -> LiveCounts:
    """The counts of a serving session's live ledger: its chunks replayed in the order they were
    written through a window of the size its ledger keeps (MAX_IDS_TAG; live_window.py), so they are
    what the ledger's own figures were."""
    from mlflow import MlflowClient

    tags = MlflowClient().get_run(run_id).data.tags
    size, per_client = tags.get(MAX_IDS_TAG), tags.get(MAX_IDS_PER_CLIENT_TAG)
    window = LiveWindow(int(size) if size else None, int(per_client) if per_client else None)
    return replay(window, chunks(run_id)).counts()


def start_live_run(model: str, champion: str, candidate: str, canary: float | None = None) -> str:
    """A new serving session's run (RUNNING) in the model's experiment; its id. A canary's session
    (`canary`: the share of ids the candidate answers) is tagged CANARY_TAG."""
    from mlflow import MlflowClient

    from orchestrator.tracking.store import experiment_id

    tags = {
        LIVE_TAG: "shadow",
        CHAMPION_TAG: champion,
        CANDIDATE_TAG: candidate,
        RUN_NAME: f"live v{champion} shadowed by v{candidate}",
    }
    if canary is not None:
        tags |= {
            CANARY_TAG: f"{canary:g}",
            RUN_NAME: f"live canary v{candidate} on {canary:.0%} beside v{champion}",
        }
    run_id: str = MlflowClient().create_run(experiment_id(model), tags=tags).info.run_id
    bind_session(model, candidate, champion, run_id)  # the registry's record of it (live_sessions.py)
    return run_id


def continue_live_run(model: str, champion: str, candidate: str, canary: float | None = None) -> tuple[str, bool]:
    """The serving session of `candidate` shadowed beside `champion`: the newest one's run, running or
    ended, set RUNNING again, so a restarted `serve` continues its evidence (its ledger reads the
    chunks back) instead of starting an empty session; else a new one (`start_live_run`). Only a
    session the candidate's registered version records is continued (live_sessions.py). A canary
    continues a canary's session only (and one withdrawn stays withdrawn), a shadow a shadow's. Its
    id, and whether it was continued."""
    from mlflow import MlflowClient

    bound = bound_sessions(model, candidate, champion)  # None: not a registered version (a test's)
    for run in live_runs(model, candidate):
        tags = run.data.tags
        if bound is not None and run.info.run_id not in bound:  # a run with a session's tags only
            continue
        if tags.get(CHAMPION_TAG) == champion and (CANARY_TAG in tags) == (canary is not None):
            MlflowClient().update_run(run.info.run_id, status="RUNNING")
            return run.info.run_id, True
    return start_live_run(model, champion, candidate, canary), False


def live_runs(model: str, candidate: str | None = None) -> list[Any]:
    """The model's serving sessions with a shadow (of `candidate` only, when given), newest first."""
    from mlflow import MlflowClient

    client = MlflowClient()
    experiment = client.get_experiment_by_name(model)
    if experiment is None:
        return []
    query = f"tags.`{LIVE_TAG}` = 'shadow'"
    if candidate is not None:
        query += f" and tags.`{CANDIDATE_TAG}` = '{candidate}'"
    return client.search_runs([experiment.experiment_id], query, order_by=["attributes.start_time DESC"])


def record_window_size(run_id: str, max_ids: int, max_ids_per_client: int | None = None) -> None:
    """Tag the session's run with the ids its ledger keeps in memory, and of them one client's
    (MAX_IDS_TAG, MAX_IDS_PER_CLIENT_TAG): `run_counts` replays its chunks through a window of that size."""
    from mlflow import MlflowClient

    MlflowClient().set_tag(run_id, MAX_IDS_TAG, str(max_ids))
    if max_ids_per_client is not None:
        MlflowClient().set_tag(run_id, MAX_IDS_PER_CLIENT_TAG, str(max_ids_per_client))


def end_live_run(run_id: str, failed: bool = False) -> None:
    """Mark a serving session's run ended: FINISHED (its evidence stands), or FAILED with `failed`."""
    from mlflow import MlflowClient

    MlflowClient().set_terminated(run_id, "FAILED" if failed else "FINISHED")


def end_running_live_runs(model: str) -> None:
    """End (FINISHED) every serving session of the model whose run is still RUNNING."""
    for run in live_runs(model):
        if run.info.status == "RUNNING":
            end_live_run(run.info.run_id)


def live_run_tags(run_id: str) -> dict[str, str] | None:
    """The tags of the run `run_id` (LIVE_TAG among them for a serving session's); None when the
    store holds no such run."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    try:
        return dict(MlflowClient().get_run(run_id).data.tags)
    except MlflowException:
        return None


def canary_outcome(run_id: str) -> str:
    """What the session's canary came to (OUTCOME_TAG: "withdrawn: why", "promoted: why"); "" while undecided."""
    from mlflow import MlflowClient

    return str(MlflowClient().get_run(run_id).data.tags.get(OUTCOME_TAG, ""))


def record_canary_outcome(run_id: str, outcome: str) -> None:
    """Tag the session's run with what its canary came to (OUTCOME_TAG, at most 5,000 characters)."""
    from mlflow import MlflowClient

    MlflowClient().set_tag(run_id, OUTCOME_TAG, outcome[:5000])


def log_live_figures(run_ids: Sequence[str], figures: Mapping[str, float], step: int) -> None:
    """Each of `figures` as metric `live.<name>` at `step` (pairs seen) of every run in `run_ids`."""
    from mlflow import MlflowClient

    client = MlflowClient()
    for key, value in figures.items():
        for run_id in run_ids:
            client.log_metric(run_id, f"live.{key}", float(value), step=step)


def live_summaries(model: str, confidence: float, only: set[str] | None = None) -> list[dict[str, Any]]:
    """Each serving session of the model with a shadow (of the run ids `only`, when given), newest
    first: its versions, state and figures."""
    summaries = []
    for run in live_runs(model):
        if only is not None and run.info.run_id not in only:  # its chunks are not even read
            continue
        tags = run.data.tags
        try:
            counts, problem = run_counts(run.info.run_id), None
        except LiveChainError as e:  # shown as refused; the gate refuses it (policy/promotion.py)
            counts, problem = LiveCounts(0, 0, 0, 0, 0, 0, 0), str(e)
        summaries.append(
            {
                "run_id": run.info.run_id,
                "champion": tags.get(CHAMPION_TAG),
                "candidate": tags.get(CANDIDATE_TAG),
                "canary": float(tags[CANARY_TAG]) if CANARY_TAG in tags else None,  # its share of ids
                "canary_outcome": tags.get(OUTCOME_TAG),
                "status": run.info.status,
                "started": run.info.start_time,
                "problem": problem,
                **counts.figures(confidence),
            }
        )
    return summaries
