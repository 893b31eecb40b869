"""The model registry: versions with their lineage and flips, the prediction ledger, the gate.

Each registered version's run holds `checkpoint/model.pt` (state_dict + settings, loaded with
`weights_only=True`), `model/` (an MLflow PyTorch model for serving) and `ledger/predictions.npz`:
its class ids and top-k logits on the regression-eval split, so that the NFR between any two
versions needs no re-inference.
"""

from __future__ import annotations

import json
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from workers.metrics import class_ids, error_rate, negative_flip_rate, nfr_matrix

LEDGER_TOPK = 5
_REFERENCE = re.compile(r"^(?:models:/)?(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(?:@(?P<alias>[A-Za-z][\w-]*)|/(?P<version>\d+))$")


class RegistryError(ValueError):
    """A registry reference or comparison that cannot be made; one line."""


@dataclass(frozen=True)
class Reference:
    name: str
    version: str


def parse_reference(text: str) -> tuple[str, str | None, str | None] | None:
    """`NAME@ALIAS`, `NAME/VERSION` or `models:/…` of those → (name, alias, version); else None."""
    match = _REFERENCE.match(text)
    return (match["name"], match["alias"], match["version"]) if match else None


def resolve(text: str) -> Reference:
    """The registered version a reference names; RegistryError when there is none."""
    parsed = parse_reference(text)
    if parsed is None:
        raise RegistryError(f"{text!r} is not a registry reference (NAME@ALIAS or NAME/VERSION)")
    name, alias, version = parsed
    client = MlflowClient()
    try:
        mv = client.get_model_version_by_alias(name, alias) if alias else client.get_model_version(name, version)
    except MlflowException:
        raise RegistryError(f"{text}: no such registered model version") from None
    return Reference(name, str(mv.version))


def _version(ref: Reference):
    return MlflowClient().get_model_version(ref.name, ref.version)


def _cache_dir(run_id: str) -> Path:
    path = Path(tempfile.gettempdir(), "congruent-registry", run_id)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _download(run_id: str, artifact: str) -> Path:
    local = _cache_dir(run_id) / artifact
    if not local.exists():
        local.parent.mkdir(parents=True, exist_ok=True)  # a single file lands in dst_path itself
        downloaded = Path(MlflowClient().download_artifacts(run_id, artifact, str(local.parent)))
        if downloaded != local:
            downloaded.replace(local)
    return local


def check_eval_split(ref: Reference, fingerprint: str) -> None:
    """RegistryError unless `ref` was evaluated on the eval split `fingerprint` (or has no record
    of one): flips against a version measured on other samples mean nothing."""
    recorded = _version(ref).tags.get("fingerprint")
    if recorded and recorded != fingerprint:
        raise RegistryError(f"old: {ref.name} version {ref.version} was evaluated on eval split {recorded}, "
                            f"this spec's data gives {fingerprint}; use the same data and eval_limit")


def checkpoint_of(ref: Reference) -> str:
    """A local copy of the version's checkpoint (state_dict + settings)."""
    try:
        return str(_download(_version(ref).run_id, "checkpoint/model.pt"))
    except MlflowException:
        raise RegistryError(f"{ref.name} version {ref.version} has no checkpoint/model.pt in its run") from None


def write_ledger(path: Path, logits: np.ndarray, labels: np.ndarray, fingerprint: str) -> Path:
    """class ids, the top-k logits (values and classes) and the labels of the eval split, .npz."""
    k = min(LEDGER_TOPK, logits.shape[1])
    order = np.argsort(-logits, axis=1, kind="stable")[:, :k]
    np.savez_compressed(
        path, class_ids=class_ids(logits).astype(np.int32), topk_indices=order.astype(np.int32),
        topk_values=np.take_along_axis(logits, order, axis=1).astype(np.float32),
        labels=labels.astype(np.int64), fingerprint=np.array(fingerprint),
    )
    return path


def read_ledger(path: str | Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as archive:
        return {key: archive[key] for key in archive.files}


def ledger_of(ref: Reference) -> dict[str, np.ndarray]:
    return read_ledger(_download(_version(ref).run_id, "ledger/predictions.npz"))


def versions(name: str) -> list[Any]:
    """Every version of a registered model, oldest first."""
    return sorted(MlflowClient().search_model_versions(f"name='{name}'"), key=lambda mv: int(mv.version))


def versions_of_spec(name: str, spec_hash: str, fingerprint: str) -> list[str]:
    """Versions of `name` registered from the spec `spec_hash` and evaluated on the eval split
    `fingerprint`, oldest first: a rerun of a registered spec finds its version here."""
    return [str(mv.version) for mv in versions(name)
            if mv.tags.get("spec_hash") == spec_hash and mv.tags.get("fingerprint") == fingerprint]


def drop_duplicate_versions(name: str, run_id: str) -> str:
    """Keep the oldest version registered from `run_id`, delete the others (a registration whose
    response was lost and that the client retried); return the kept version."""
    mine = [mv for mv in versions(name) if mv.run_id == run_id]
    if not mine:
        raise RegistryError(f"{name}: no version registered from run {run_id}")
    for extra in mine[1:]:
        MlflowClient().delete_model_version(name, extra.version)
    return str(mine[0].version)


def chain_matrix(name: str, fingerprint: str) -> tuple[list[str], list[list[float]]]:
    """Versions of `name` evaluated on the eval split `fingerprint`, and their pairwise NFR matrix
    M[i][j] = NFR of version j relative to version i, computed from the ledgers."""
    members = [mv for mv in versions(name) if mv.tags.get("fingerprint") == fingerprint]
    if not members:
        return [], []
    ledgers = [ledger_of(Reference(name, mv.version)) for mv in members]
    labels = ledgers[0]["labels"]
    return [str(mv.version) for mv in members], nfr_matrix([ledger["class_ids"] for ledger in ledgers], labels).tolist()


def write_matrix_files(folder: Path, names: list[str], matrix: list[list[float]], title: str) -> list[Path]:
    """nfr_matrix.json and a heatmap nfr_matrix.png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    json_path = folder / "nfr_matrix.json"
    json_path.write_text(json.dumps({"versions": names, "nfr_matrix": matrix}, indent=2))
    size = max(3.0, 0.6 * len(names) + 2)
    fig, ax = plt.subplots(figsize=(size + 1, size))
    image = ax.imshow(100 * np.array(matrix), cmap="Reds")
    ax.set_xticks(range(len(names)), names)
    ax.set_yticks(range(len(names)), names)
    ax.set_xlabel("new version")
    ax.set_ylabel("old version")
    if len(names) <= 12:
        darkest = max((max(row) for row in matrix), default=0.0) or 1.0
        for i, row in enumerate(matrix):
            for j, value in enumerate(row):
                ax.text(j, i, f"{100 * value:.2f}", ha="center", va="center", fontsize=8,
                        color="white" if value > 0.6 * darkest else "black")
    fig.colorbar(image, ax=ax, label="NFR (%)")
    ax.set_title(title)
    fig.tight_layout()
    png_path = folder / "nfr_matrix.png"
    fig.savefig(png_path, dpi=100)
    plt.close(fig)
    return [json_path, png_path]


def gate(name: str, candidate: str, max_nfr: float, max_er_increase: float) -> tuple[bool, str]:
    """Whether `candidate` may become `champion`: NFR against the current champion ≤ max_nfr and
    ER − ER_champion ≤ max_er_increase, from the ledgers. Without a champion, it passes."""
    client = MlflowClient()
    try:
        champion = client.get_model_version_by_alias(name, "champion")
    except MlflowException:
        return True, f"{name} has no champion yet"
    new = ledger_of(Reference(name, candidate))
    old = ledger_of(Reference(name, str(champion.version)))
    if str(new["fingerprint"]) != str(old["fingerprint"]):
        raise RegistryError(f"{name} v{candidate} and champion v{champion.version} were evaluated on different "
                            f"eval splits ({new['fingerprint']} vs {old['fingerprint']})")
    labels = new["labels"]
    nfr = negative_flip_rate(old["class_ids"], new["class_ids"], labels)
    increase = error_rate(new["class_ids"], labels) - error_rate(old["class_ids"], labels)
    problems = []
    if nfr > max_nfr:
        problems.append(f"NFR {100 * nfr:.2f} % > {100 * max_nfr:.2f} %")
    if increase > max_er_increase:
        problems.append(f"ER increase {100 * increase:+.2f} pt > {100 * max_er_increase:+.2f} pt")
    against = f"against champion v{champion.version}: NFR {100 * nfr:.2f} %, ER {100 * increase:+.2f} pt"
    return (not problems), ("; ".join(problems) + f" ({against})" if problems else against)


def set_champion(name: str, version: str) -> None:
    """Move alias `champion` to an existing version; RegistryError if there is no such version."""
    resolve(f"{name}/{version}")
    MlflowClient().set_registered_model_alias(name, "champion", version)
