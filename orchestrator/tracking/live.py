"""The live ledger: what a served champion and its shadowed candidate answered on real requests, and
the labels that arrive later (`congruent serve`, orchestrator/serving/).

A serving session with a shadow is an MLflow run of its own in the model's experiment, tagged
LIVE_TAG, CHAMPION_TAG and CANDIDATE_TAG. Its artifacts hold parquet chunks, each written once:

- `live/pairs/*.parquet` (PAIR_SCHEMA): one row per shadowed sample: its request id, a digest of its
  input, when it was answered, each version's class and probability;
- `live/labels/*.parquet` (LABEL_SCHEMA): a request id and its label, as feedback gave them.

Figures join the two by request id and count globally, each id once: of several pairs of one id (a
sample sent again, or rows the gateway resent after a lost reply) the latest counts, as the latest
label of an id does:
the disagreement rate of the two versions' classes over every pair, known at once and without
labels; over the labelled pairs, each version's ER, the NFR (champion right, candidate wrong) and
the PFR, each k of n with its Wilson bound (workers/confidence.py).
"""

from __future__ import annotations

import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

LIVE_TAG = "congruent.live"  # "shadow": the run is a serving session's live ledger
CHAMPION_TAG = "congruent.live.champion"  # the served version
CANDIDATE_TAG = "congruent.live.candidate"  # the shadowed version
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
        ]
    )
    labels = pa.schema([("id", pa.string()), ("label", pa.int64()), ("time", pa.float64())])
    return {"pairs": pairs, "labels": labels}


def write_chunk(run_id: str, kind: Kind, rows: Sequence[Mapping[str, Any]]) -> str:
    """`rows` as one parquet chunk `live/<kind>/chunk-<ns>-<random>.parquet` of the run; its name."""
    import pyarrow as pa
    import pyarrow.parquet as pq  # type: ignore[import-untyped]
    from mlflow import MlflowClient

    schema = _schemas()[kind]
    table = pa.Table.from_pylist([{name: row[name] for name in schema.names} for row in rows], schema=schema)
    name = f"chunk-{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.parquet"
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        pq.write_table(table, path)
        MlflowClient().log_artifact(run_id, str(path), f"live/{kind}")
    return name


def read_chunks(run_id: str, kind: Kind) -> dict[str, np.ndarray]:
    """Every chunk of `kind` the run holds, as columns (empty columns when it holds none)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from mlflow import MlflowClient, artifacts

    schema = _schemas()[kind]
    names = [info.path for info in MlflowClient().list_artifacts(run_id, f"live/{kind}")]
    tables = [schema.empty_table()]
    if names:
        with tempfile.TemporaryDirectory() as folder:
            local = Path(artifacts.download_artifacts(run_id=run_id, artifact_path=f"live/{kind}", dst_path=folder))
            tables += [pq.read_table(path, schema=schema) for path in sorted(local.glob("*.parquet"))]
    table = pa.concat_tables(tables)
    return {name: table.column(name).to_numpy(zero_copy_only=False) for name in schema.names}


def latest_of_each_id(ids: np.ndarray, times: np.ndarray) -> np.ndarray:
    """The indices of the rows that count, one per id: the latest (by time, then by order given),
    in the order of their ids' first rows."""
    latest: dict[str, int] = {}
    for index in np.lexsort((np.arange(len(times)), times)):  # later rows overwrite earlier ones
        latest[str(ids[index])] = int(index)
    first: dict[str, int] = {}
    for index, sample_id in enumerate(ids):
        first.setdefault(str(sample_id), index)
    return np.array(sorted(latest.values(), key=lambda i: first[str(ids[i])]), dtype=np.int64)


def latest_labels(pair_ids: np.ndarray, label_ids: np.ndarray, labels: np.ndarray, times: np.ndarray) -> np.ndarray:
    """The label of each pair (−1: none yet): of several labels of one id, the latest (by time, then
    by order given) counts."""
    order = np.lexsort((np.arange(len(times)), times))
    latest = {str(i): int(label) for i, label in zip(label_ids[order], labels[order])}  # later overwrite earlier
    return np.array([latest.get(str(i), -1) for i in pair_ids], dtype=np.int64)


@dataclass(frozen=True)
class LiveCounts:
    """Counts of the pairs seen: all of them and their disagreements, and of the labelled ones the
    errors of each version and the flips (NFR = negative_flips / labelled, PFR likewise)."""

    pairs: int
    disagreements: int
    labelled: int
    champion_errors: int
    candidate_errors: int
    negative_flips: int
    positive_flips: int

    def figures(self, confidence: float) -> dict[str, Any]:
        """Rates with Wilson bounds at `confidence`: `*_upper` one-sided upper, the disagreement's
        lower one too (None where nothing was counted)."""
        from workers.confidence import wilson_upper

        def rate(k: int, n: int) -> float | None:
            return k / n if n else None

        def upper(k: int, n: int) -> float | None:
            return wilson_upper(k, n, confidence) if n else None

        return {
            **asdict(self),
            "confidence": confidence,
            "disagreement": rate(self.disagreements, self.pairs),
            "disagreement_upper": upper(self.disagreements, self.pairs),
            "disagreement_lower": 1 - wilson_upper(self.pairs - self.disagreements, self.pairs, confidence)
            if self.pairs
            else None,
            "champion_error_rate": rate(self.champion_errors, self.labelled),
            "candidate_error_rate": rate(self.candidate_errors, self.labelled),
            "nfr": rate(self.negative_flips, self.labelled),
            "nfr_upper": upper(self.negative_flips, self.labelled),
            "pfr": rate(self.positive_flips, self.labelled),
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
    """The counts of a serving session's live ledger: its chunks joined by request id, each id's
    latest pair once."""
    pairs, labels = read_chunks(run_id, "pairs"), read_chunks(run_id, "labels")
    kept = latest_of_each_id(pairs["id"], pairs["time"])
    joined = latest_labels(pairs["id"][kept], labels["id"], labels["label"], labels["time"])
    return live_counts(pairs["champion_class"][kept], pairs["candidate_class"][kept], joined)


def start_live_run(model: str, champion: str, candidate: str) -> str:
    """A new serving session's run (RUNNING) in the model's experiment; its id."""
    from mlflow import MlflowClient

    from orchestrator.tracking.store import experiment_id

    tags = {
        LIVE_TAG: "shadow",
        CHAMPION_TAG: champion,
        CANDIDATE_TAG: candidate,
        "mlflow.runName": f"live v{champion} shadowed by v{candidate}",
    }
    return MlflowClient().create_run(experiment_id(model), tags=tags).info.run_id


def continue_live_run(model: str, champion: str, candidate: str) -> tuple[str, bool]:
    """The serving session of `candidate` shadowed beside `champion`: the newest one's run, running or
    ended, set RUNNING again, so a restarted `serve` continues its evidence (its ledger reads the
    chunks back) instead of starting an empty session; else a new one (`start_live_run`). Its id,
    and whether it was continued."""
    from mlflow import MlflowClient

    for run in live_runs(model, candidate):
        if run.data.tags.get(CHAMPION_TAG) == champion:
            MlflowClient().update_run(run.info.run_id, status="RUNNING")
            return run.info.run_id, True
    return start_live_run(model, champion, candidate), False


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


def live_summaries(model: str, confidence: float) -> list[dict[str, Any]]:
    """Each serving session of the model with a shadow, newest first: its versions, state and figures."""
    summaries = []
    for run in live_runs(model):
        tags = run.data.tags
        summaries.append(
            {
                "run_id": run.info.run_id,
                "champion": tags.get(CHAMPION_TAG),
                "candidate": tags.get(CANDIDATE_TAG),
                "status": run.info.status,
                "started": run.info.start_time,
                **run_counts(run.info.run_id).figures(confidence),
            }
        )
    return summaries
