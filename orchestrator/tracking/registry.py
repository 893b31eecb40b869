"""The model registry: versions with their lineage and flips, the prediction ledger, the chain's
NFR matrix, and registering a pipeline's model (moving `champion`: promotion.py).

Each registered version's run holds `checkpoint/model.pt` (state_dict + settings, loaded with
`weights_only=True`), `model/` (an MLflow pyfunc model on raw inputs: pyfunc_model.py) and `ledger/predictions.parquet`:
its samples' ids, labels, class ids and top-k logits on the regression-eval split (ledger.py), so
that the NFR between any two versions needs no re-inference and is counted on the samples both
were evaluated on (`ledger/predictions.npz` of versions registered before ids: by position).
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import mlflow
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from orchestrator.tracking import descriptions, pyfunc_log
from orchestrator.tracking.artifact_cache import checksum_tag, fetch, sha256_of
from orchestrator.tracking.deferred import interrupts_deferred
from orchestrator.tracking.ledger import (
    COMPARED,
    chain_nfr_matrix,
    read_ledger,
    shared_samples,
)
from orchestrator.tracking.ledger_files import PARENT_LEDGER, ledger_name, ledger_path, version_ledger_path
from orchestrator.tracking.locks import claim_backend, registry_lock
from orchestrator.tracking.tags import PUBLISHING, REUSED_VERSION, SPEC_FILE, SPEC_HASH
from orchestrator.tracking.version_record import VersionRecord
from orchestrator.tracking.version_refs import RegistryError, VersionRef, parse_version_ref
from orchestrator.views import plots


def resolve(text: str) -> VersionRef:
    """The registered version a reference names; RegistryError when there is none."""
    parsed = parse_version_ref(text)
    if parsed is None:
        raise RegistryError(f"{text!r} is not a registry reference (NAME@ALIAS or NAME/VERSION)")
    name, alias, version = parsed
    client = MlflowClient()
    try:
        if alias:
            mv = client.get_model_version_by_alias(name, alias)
        else:
            assert version is not None  # _VERSION_REF matches an alias or a version
            mv = client.get_model_version(name, version)
    except MlflowException:
        raise RegistryError(
            f"{text}: no such registered model version ({_what_exists(name, alias, version)})"
        ) from None
    if PUBLISHING in (mv.tags or {}):
        raise RegistryError(f"{text}: version {mv.version} is incomplete (its publication was interrupted)")
    return VersionRef(name, str(mv.version))


def _what_exists(name: str, alias: str | None, version: str | None) -> str:
    """Why a reference names nothing: no such model, or which aliases / versions it has instead."""
    try:
        model = MlflowClient().get_registered_model(name)
    except MlflowException:
        return f"no registered model {name!r}"
    if alias:
        aliases = ", ".join(sorted(model.aliases)) or "none"
        return f"{name} has no alias {alias!r}; its aliases: {aliases}"
    listed = ", ".join(str(mv.version) for mv in versions(name)) or "none"
    return f"{name} has no version {version}; its versions: {listed}"


def _version(ref: VersionRef):
    return MlflowClient().get_model_version(ref.name, ref.version)


def run_of(ref: VersionRef) -> str:
    """The id of the run that registered the version."""
    return _version(ref).run_id


MIN_SHARED_EVAL = 0.5  # of the smaller eval set: what `old:` needs in common (the spec's `old` field says it)


def check_shared_eval(ref: VersionRef, ids: Any, fingerprint: str) -> int:
    """How many of the eval samples `ids` (this spec's eval split, fingerprint `fingerprint`) the
    version `ref` was evaluated on too; RegistryError when fewer than MIN_SHARED_EVAL of the smaller
    of the two eval sets (flips against a version measured on other samples mean nothing), or when
    its ledger predates sample ids (or it has none) and its eval split is not this one."""
    import numpy as np

    mv = _version(ref)
    if ledger_path(mv.run_id, mv.tags) is None:  # registered by hand: only its record says what it was evaluated on
        recorded = VersionRecord.from_model_version(mv).fingerprint
        if recorded and recorded != fingerprint:
            raise RegistryError(
                f"old: {ref.name} version {ref.version} was evaluated on eval split {recorded} and its run holds "
                f"no ledger to match samples by; this spec's data gives {fingerprint}: use the same data"
            )
        return 0
    ledger = ledger_of(ref, ("ids", "labels"))
    if ledger["positional"]:
        if ledger["fingerprint"] != fingerprint:
            raise RegistryError(
                f"old: {ref.name} version {ref.version} was evaluated on eval split {ledger['fingerprint']} "
                f"before ledgers held sample ids, this spec's data gives {fingerprint}; "
                "use its data, or re-evaluate it (rerun its spec) to compare by sample"
            )
        return len(ledger["ids"])
    mine = {"ids": np.asarray(ids), "labels": np.zeros(len(ids), np.int64), "positional": False}
    theirs = {**ledger, "labels": np.zeros(len(ledger["ids"]), np.int64)}  # ids alone: copies pair by position
    shared = len(shared_samples(theirs, mine)[0])
    smaller = min(len(ids), len(ledger["ids"]))
    if shared < MIN_SHARED_EVAL * smaller:
        raise RegistryError(
            f"old: {ref.name} version {ref.version} was evaluated on {len(ledger['ids']):,} samples, this spec's "
            f"eval split has {len(ids):,}, and they share {shared:,}: at least {MIN_SHARED_EVAL:.0%} of the smaller "
            "must be shared for flips between them to mean anything; use data that holds the old version's"
        )
    return shared


def checkpoint_of(ref: VersionRef) -> str:
    """A local copy of the version's checkpoint (state_dict + settings)."""
    try:
        mv = _version(ref)
        return str(fetch(mv.run_id, "checkpoint/model.pt", mv.tags))
    except MlflowException:
        raise RegistryError(f"{ref.name} version {ref.version} has no checkpoint/model.pt in its run") from None


def spec_of(ref: VersionRef) -> Any:
    """The spec (pipelines.spec.UpdateSpec) the version ran, as registered: its run's spec.yaml checked
    against the sha256 its registration recorded (artifact_cache.py) and against its `spec_hash` tag
    (all a version registered before that has); RegistryError when it differs or is missing: a
    run's artifacts are editable by whoever may edit the run, the version's record is the registry's."""
    from pipelines.spec import SpecError, load_spec

    mv = _version(ref)
    try:
        spec = load_spec(fetch(mv.run_id, SPEC_FILE, mv.tags))
    except (MlflowException, OSError, SpecError):
        raise RegistryError(f"{ref.name} version {ref.version}: its run holds no readable spec.yaml") from None
    if spec.spec_hash != (mv.tags or {}).get(SPEC_HASH):
        raise RegistryError(
            f"{ref.name} version {ref.version}: its run's spec.yaml is not the spec it registered "
            f"(spec {spec.spec_hash}, registered {(mv.tags or {}).get(SPEC_HASH)}): not read"
        )
    return spec


def ledger_of(ref: VersionRef, columns: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The version's ledger (ledger.py `read_ledger`); RegistryError when its run holds none."""
    mv = _version(ref)
    path = version_ledger_path(mv)
    if path is None:
        raise RegistryError(f"{ref.name} version {ref.version} has no ledger in its run")
    return read_ledger(path, columns)


def all_versions(name: str) -> list[Any]:
    """Every version of a registered model, complete or not, oldest first."""
    return sorted(MlflowClient().search_model_versions(f"name='{name}'"), key=lambda mv: int(mv.version))


def versions(name: str, publishing: str | None = None, incomplete: bool = False) -> list[Any]:
    """The complete versions of a registered model, oldest first, and version `publishing` (the one
    being published); with `incomplete`, only those whose publication never completed (a driver
    killed meanwhile): every reader but `congruent versions` ignores them."""
    listed = all_versions(name)
    if incomplete:
        return [mv for mv in listed if PUBLISHING in (mv.tags or {})]
    return [mv for mv in listed if PUBLISHING not in (mv.tags or {}) or str(mv.version) == publishing]


def versions_of_spec(name: str, spec_hash: str, fingerprint: str) -> list[str]:
    """Versions of `name` registered from the spec `spec_hash` and evaluated on the eval split
    `fingerprint`, oldest first: a rerun of a registered spec finds its version here."""
    records = map(VersionRecord.from_model_version, versions(name))
    return [r.version for r in records if r.spec_hash == spec_hash and r.fingerprint == fingerprint]


def drop_duplicate_versions(name: str, run_id: str | None) -> str:
    """Keep the oldest version registered from `run_id`, delete the others (a registration whose
    response was lost and that the client retried); return the kept version."""
    mine = [mv for mv in all_versions(name) if mv.run_id == run_id]
    if not mine:
        raise RegistryError(f"{name}: no version registered from run {run_id}")
    for extra in mine[1:]:
        MlflowClient().delete_model_version(name, extra.version)
    return str(mine[0].version)


def chain_matrix(
    name: str, publishing: str | None = None
) -> tuple[list[str], list[list[float | None]], list[list[int]]]:
    """The versions of `name` that hold a ledger, their pairwise NFR matrix M[i][j] = NFR of version
    j relative to version i, and S[i][j] the samples it is counted on: the samples both were
    evaluated on, of the classes version i knows (ledger.py `chain_nfr_matrix`; None where they
    share none, or one ledger is by position and the other by id)."""
    import numpy as np

    members = [(str(mv.version), version_ledger_path(mv)) for mv in versions(name, publishing)]
    held = [(version, path) for version, path in members if path is not None]
    if not held:
        return [], [], []
    matrix, shared = chain_nfr_matrix([read_ledger(path, COMPARED) for _, path in held])
    cells = [[None if np.isnan(value) else float(value) for value in row] for row in matrix]
    return [version for version, _ in held], cells, shared.tolist()


def write_matrix_files(
    folder: Path, names: list[str], matrix: list[list[float | None]], shared: list[list[int]], title: str
) -> list[Path]:
    """nfr_matrix.json (with the samples each cell counts) and its heatmap nfr_matrix.png."""
    folder.mkdir(parents=True, exist_ok=True)
    json_path = folder / "nfr_matrix.json"
    json_path.write_text(json.dumps({"versions": names, "nfr_matrix": matrix, "shared_samples": shared}, indent=2))
    return [json_path, plots.save(plots.nfr_heatmap(names, matrix, title), folder / "nfr_matrix.png", dpi=100)]


def chain(name: str, publishing: str | None = None) -> list[VersionRecord]:
    """One record per complete version (and `publishing`), oldest first: lineage, method, ER and
    flips against the parent, aliases, when it was registered."""
    listed = versions(name, publishing)
    aliases: dict[str, list[str]] = {}
    if listed:
        for alias, version in MlflowClient().get_registered_model(name).aliases.items():
            aliases.setdefault(str(version), []).append(alias)
    return [VersionRecord.from_model_version(mv, tuple(sorted(aliases.get(str(mv.version), [])))) for mv in listed]


def register(
    model: str, checkpoint: str, record: VersionRecord, allow_user_factories: bool = False, input_column: str = "text"
) -> str:
    """A new version of `model` from `checkpoint` (`_register`), whatever the registry holds."""
    return _register(model, checkpoint, record, allow_user_factories, once=False, input_column=input_column)[0]


def register_once(
    model: str, checkpoint: str, record: VersionRecord, allow_user_factories: bool = False, input_column: str = "text"
) -> tuple[str, bool]:
    """(version, registered now): the version a run of the same spec (the record's `spec_hash` and
    `fingerprint`) registered, else a new one. The check and the registration hold the model's
    `registration` lock (locks.py), so runs of one spec that finish together register it once."""
    existing = versions_of_spec(model, record.spec_hash, record.fingerprint)  # a rerun: nothing to log
    version, new = (
        (existing[0], False)
        if existing
        else _register(model, checkpoint, record, allow_user_factories, True, input_column)
    )
    if not new:
        mlflow.set_tag(REUSED_VERSION, version)
    return version, new


def _register(
    model: str,
    checkpoint: str,
    record: VersionRecord,
    allow_user_factories: bool,
    once: bool,
    input_column: str = "text",
) -> tuple[str, bool]:
    """Register the checkpoint (logged to the active run as `checkpoint/model.pt`, as it is: the
    pipelines give the registry's copy the evaluation wrote, workers/tasks/bodies.py
    `registry_checkpoint`; plus the MLflow pyfunc model on raw inputs that reads it: pyfunc_model.py,
    texts from `input_column`) as a new version of `model` with the tags of `record` and alias
    `challenger`, log the chain's NFR matrix and write the model's and the version's descriptions;
    returns (version, True). With `once`, a version of the same spec registered meanwhile is returned instead, as
    (version, False). Nothing stays registered if a step fails."""
    from workers.models.checkpoints import ModelSettings, read_checkpoint
    from workers.storage import fetch_checkpoint

    path = fetch_checkpoint(checkpoint)
    settings = ModelSettings.from_record(read_checkpoint(path)["model"])
    with tempfile.TemporaryDirectory() as tmp:
        logged = Path(tmp, "model.pt")  # the artifact's name, whatever the file's
        shutil.copyfile(path, logged)
        mlflow.log_artifact(str(logged), "checkpoint")
        checksums = {checksum_tag("checkpoint/model.pt"): sha256_of(logged), **_run_checksums(tmp)}
        if settings.config is not None and settings.inputs.tokenizer is not None:  # hf:DIR: readable beside it
            for name, text in (("config.json", settings.config), ("tokenizer.json", settings.inputs.tokenizer)):
                Path(tmp, name).write_text(text)
                mlflow.log_artifact(str(Path(tmp, name)), "checkpoint")
        sha256 = checksums[checksum_tag("checkpoint/model.pt")]
        info = pyfunc_log.log_pyfunc(logged, settings, sha256, input_column, allow_user_factories)
    # MLflow prints "Successfully registered model …" and "Created version …" to stderr itself (muted
    # in `_publish`); the commands say which version was registered, in a line of their own
    with interrupts_deferred():  # Ctrl-C or cancel now: the version completes first, then the run stops
        return _publish(model, info.model_uri, record, once, checksums)


def _run_checksums(folder: str) -> dict[str, str]:
    """{checksum tag: sha256} of the active run's ledger and spec.yaml as the artifact store holds
    them now (fetched into `folder`), recorded with the version so later copies are checked against it."""
    run = mlflow.active_run()
    if run is None:
        return {}
    names = [f"ledger/{name}"] if (name := ledger_name(run.info.run_id)) is not None else []
    if PARENT_LEDGER in {info.path for info in MlflowClient().list_artifacts(run.info.run_id, "ledger/parent")}:
        names.append(PARENT_LEDGER)
    names += [SPEC_FILE] if SPEC_FILE in {info.path for info in MlflowClient().list_artifacts(run.info.run_id)} else []
    client = MlflowClient()
    return {checksum_tag(n): sha256_of(client.download_artifacts(run.info.run_id, n, folder)) for n in names}


def _publish(
    model: str, model_uri: str, record: VersionRecord, once: bool, checksums: Mapping[str, str]
) -> tuple[str, bool]:
    """Register `model_uri` with the record's tags and PUBLISHING, then its alias, the chain's
    matrix and descriptions, and remove PUBLISHING last: a version is complete or, to every reader
    but `congruent versions`, invisible (a driver killed meanwhile leaves it incomplete; a rerun of
    its spec discards it). A failing step deletes the version."""
    client = MlflowClient()
    # the whole publication holds the lock: a rerun of the spec that finds no complete version
    # must not register beside a version still being published
    with registry_lock(model, "registration") as lease:
        discard_incomplete(model, record.spec_hash, record.fingerprint)
        if once and (existing := versions_of_spec(model, record.spec_hash, record.fingerprint)):
            return existing[0], False
        lease.check()  # fencing: this run still holds the lock (locks.py)
        claim_backend(client, model, lease.backend)  # a new model records which locks guard it
        with contextlib.redirect_stderr(io.StringIO()):
            tags = {**record.to_tags(), **checksums, PUBLISHING: "1"}
            registered = mlflow.register_model(model_uri, model, tags=tags)
        version = drop_duplicate_versions(model, registered.run_id)  # HTTP retries may double a POST
        try:
            client.set_registered_model_alias(model, "challenger", version)
            names, matrix, shared = chain_matrix(model, version)
            with tempfile.TemporaryDirectory() as tmp:
                for matrix_file in write_matrix_files(
                    Path(tmp), [f"v{n}" for n in names], matrix, shared, f"{model}: NFR of column vs row (%)"
                ):
                    mlflow.log_artifact(str(matrix_file))
            descriptions.describe(model, chain(model, version), version)  # the chain in MLflow's own fields
            lease.check()  # still the only publisher: no other version went in meanwhile
            client.delete_model_version_tag(model, version, PUBLISHING)  # complete
        except BaseException:
            client.delete_model_version(model, version)
            raise
    return version, True


def discard_incomplete(model: str, spec_hash: str, fingerprint: str) -> list[str]:
    """Delete the incomplete versions of this spec whose runs have ended (a driver killed while it
    published; its rerun closed the run): what a rerun cleans before it registers. A run still
    RUNNING may be publishing now: left alone."""
    client, discarded = MlflowClient(), []
    for mv in versions(model, incomplete=True):
        record = VersionRecord.from_model_version(mv)
        if record.spec_hash != spec_hash or record.fingerprint != fingerprint:
            continue
        with contextlib.suppress(MlflowException):
            if mv.run_id and client.get_run(mv.run_id).info.status == "RUNNING":
                continue
        client.delete_model_version(model, str(mv.version))
        discarded.append(str(mv.version))
    return discarded
