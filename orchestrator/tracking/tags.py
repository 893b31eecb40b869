"""Every tag key Congruent writes to or reads from MLflow, in one place: a pipeline's run, a
registered version, a registered model, a serving session's run, a protected set's run, a lock.

The names are what stores already hold: changing one would hide what every existing registry
recorded under it. Two keys differ for one fact, as they always have: a run's `auto.choice`
(RUN_AUTO_CHOICE) and a version's `auto_choice` (a VERSION_TAGS entry).
"""

from __future__ import annotations

# MLflow's own run tags
RUN_NAME = "mlflow.runName"
PARENT_RUN = "mlflow.parentRunId"

# a pipeline's run (runs.py, the driver)
SPEC_HASH = "spec_hash"  # the spec it ran (a version's tag too)
SPEC_FILE = "spec.yaml"  # the artifact a run's spec is logged as (runs.py); registration records its sha256
CODE_VERSION = "code_version"
SYSTEM_PREFIX = "system."  # system.python, system.torch, …: where it ran
DRIVER_HOST = "driver.host"  # the driver process, so a rerun can tell a dead one's run (close_orphaned_runs)
DRIVER_PID = "driver.pid"
ENDED_BY = "ended_by"  # why a rerun closed an orphaned run
TEMPORARY_TAG = "temporary_storage"  # JSON list of the storage folders a run deletes when it ends
FINGERPRINT = "fingerprint"  # the eval split's fingerprint (a version's tag too)
PROMOTION = "promotion"  # the gate's verdict: "champion: why" or "rejected: why"
REUSED_VERSION = "reused_version"  # a rerun of a registered spec: the version it found
RUN_AUTO_CHOICE = "auto.choice"  # method auto: the candidate it shipped
TUNE_PICK = "tune.pick"  # Tune: the picked trial's config (JSON), or "none"
BCWI_ALPHA = "bcwi.alpha"

# a training's nested run: where it trained
TRAINED_PID = "pid"
TRAINED_HOST = "host"
TRAINED_NODE = "node_id"

# a registered version's tags: VersionRecord's field → its tag (version_record.py)
VERSION_TAGS = {
    "method": "method",
    "arch": "arch",
    "label": "label",
    "fingerprint": FINGERPRINT,
    "spec_hash": SPEC_HASH,
    "base_digest": "base_digest",
    "adapter": "adapter",
    "error_rate": "error_rate",
    "parent_version": "parent_version",
    "old": "old",
    "foreign_parent": "foreign_parent",
    "nfr": "nfr",
    "pfr": "pfr",
    "rel_nfr": "rel_nfr",
    "n_compared": "n_compared",
    "nfr_classes": "nfr_classes",
    "class_names": "classes",
    "chosen": "auto_choice",
    "candidates": "auto_candidates",
}
PUBLISHING = "publishing"  # a version's tag from its registration until its publication completes
CHECKSUM_PREFIX = "sha256."  # a version's tag `sha256.<artifact>`: the sha256 of its run's artifact

# a serving session's run (live.py)
LIVE_TAG = "congruent.live"  # "shadow": the run is a serving session's live ledger
CHAMPION_TAG = "congruent.live.champion"  # the served version
CANDIDATE_TAG = "congruent.live.candidate"  # the shadowed version
CANARY_TAG = "congruent.live.canary"  # a canary's session: the share of ids its candidate answered
OUTCOME_TAG = "congruent.live.canary.outcome"  # "withdrawn: why" or "promoted: why", once decided
MAX_IDS_TAG = "congruent.live.max_ids"  # the ids its ledger keeps in memory (`serve --max-live-ids`)
MAX_IDS_PER_CLIENT_TAG = "congruent.live.max_ids_per_client"  # of them, one client's (`--max-live-ids-per-client`)
CHAIN_TAG = "congruent.live.chain"  # "N:HEX": the running sha256 over its N chunks (live_chain.py)
SESSIONS_TAG = "congruent.live.sessions.v"  # + champion: a version's serving sessions beside it (run ids, comma)

# protected sets (protected.py)
PROTECTED_TAG = "congruent.protected"  # a protected set's run: its set version
PROTECTED_RUN_TAG = "congruent.protected_run"  # the registered model's tag: the current set's run

# locks (locks.py): each lock is a registered model of its own
LOCK_TAG = "congruent.lock"  # on every lock; its value is the purpose
LOCK_BACKEND_TAG = "congruent.lock_backend"  # on a registered model: the LockBackend.name of its locks
LOCK_TOKEN = "token"  # the holder's fencing token
LOCK_HOLDER = "holder"  # host:pid
LOCK_RENEWALS = "renewals"
