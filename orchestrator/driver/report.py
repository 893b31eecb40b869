"""What `congruent report MODEL` shows, gathered from the MLflow registry and tracking store, and
the page written and logged.

The version chain (registry tags), the pairwise NFR matrix (from the ledgers), one ER–NFR point per
evaluated run of the model's experiment (pipelines and Tune trials), and the flip explorer: the
negative flips of a version (the latest, or the one asked for) against its parent, with the eval
images when the data of the version's spec is available here and has the same fingerprint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from orchestrator.planning.plan import data_request
from orchestrator.tracking import registry, runs
from orchestrator.tracking.ledger import LedgerMismatch, shared_samples
from orchestrator.tracking.live import live_summaries
from orchestrator.tracking.slice_figures import pair_slice_rows
from orchestrator.tracking.version_record import SHOWN_CONFIDENCE
from orchestrator.views.live import LIVE_HEADERS, live_row
from orchestrator.views.report import Flip, ReportData, png_thumbnail, render_html, top1_confidence
from workers.data import ImageSet
from workers.data.text import TextSet
from workers.metrics import negative_flips, per_class_nfr
from workers.slices import MIN_SLICE_N
from workers.tasks.resolve import cached_splits

MAX_FLIPS_SHOWN = 60
SLICES_PLOTTED = 15  # the worst slices the report draws


def eval_images(run_id: str, fingerprint: str) -> tuple[Any | None, str | None]:
    """The eval split of the version's spec (run artifact spec.yaml: images for thumbnails, or the
    texts themselves) if it loads here with the same fingerprint; else (None, why)."""
    try:
        splits = cached_splits(data_request(runs.spec_of(run_id)))
    except Exception as e:  # noqa: BLE001 — thumbnails are optional, the flips are not
        return None, f"no thumbnails: the version's data could not be loaded here ({type(e).__name__}: {e})"
    if splits.fingerprint != fingerprint:
        return None, f"no thumbnails: the data here has fingerprint {splits.fingerprint}, the ledger {fingerprint}"
    return splits.eval, None


def flip_explorer(data: ReportData, run_id: str, new: dict[str, np.ndarray], old: dict[str, np.ndarray]) -> None:
    """Fill the flip explorer of `data` from the ledgers of the explored version and its parent,
    on the eval samples both hold (matched by id; LedgerMismatch when they cannot be)."""
    in_old, in_new = shared_samples(old, new, ("the parent", "this version"))
    labels = new["labels"][in_new]
    old_ids, new_ids = old["class_ids"][in_old], new["class_ids"][in_new]
    flips = negative_flips(old_ids, new_ids, labels)
    images, why = eval_images(run_id, str(new["fingerprint"]))
    if why:
        data.notes.append(why)
    num_classes = int(max(labels.max(initial=0), new_ids.max(initial=0), old_ids.max(initial=0))) + 1
    names = list(images.classes) if images is not None and images.classes else [str(c) for c in range(num_classes)]
    names += [str(c) for c in range(len(names), num_classes)]
    old_conf = top1_confidence(old["topk_values"])[in_old]
    new_conf = top1_confidence(new["topk_values"])[in_new]
    shown = flips[np.argsort(-new_conf[flips], kind="stable")][:MAX_FLIPS_SHOWN]  # most confident mistakes first
    data.n_eval, data.n_flips = int(len(labels)), int(len(flips))
    data.flips = [
        Flip(
            int(in_new[i]),  # the sample's place in the version's own eval split
            names[labels[i]],
            names[old_ids[i]],
            float(old_conf[i]),
            names[new_ids[i]],
            float(new_conf[i]),
            png_thumbnail(images.images[in_new[i]].numpy()) if isinstance(images, ImageSet) else None,
            images.texts[in_new[i]] if isinstance(images, TextSet) else None,
        )
        for i in shown
    ]
    data.per_class = list(zip(names, per_class_nfr(old_ids, new_ids, labels, num_classes).tolist()))


def gather(model: str, version: str | None = None) -> ReportData:
    """Everything the report shows for registered model `model`, its flip explorer on `version`
    (default: the latest) against that version's parent (RegistryError if there is no such
    version)."""
    records = registry.chain(model)
    if not records:
        raise registry.RegistryError(f"{model}: no registered versions")
    chosen = records[-1] if version is None else next((r for r in records if r.version == str(version)), None)
    if chosen is None:
        raise registry.RegistryError(
            f"{model} has no version {version}; its versions: {', '.join(r.version for r in records)}"
        )
    names, matrix, _ = registry.chain_matrix(model)
    listed = {str(mv.version): mv for mv in registry.versions(model)}
    registered = {mv.run_id: v for v, mv in listed.items()}
    rows = [r.row() for r in records]
    data = ReportData(model, rows, names, matrix, runs.evaluated_points(model, registered), chosen.version)
    data.live = [live_row(session) for session in live_summaries(model, SHOWN_CONFIDENCE)]
    data.live_headers = LIVE_HEADERS
    parent = chosen.parent_of(model)
    if parent is None:
        earlier = records[: records.index(chosen)]
        parent = earlier[-1].version if earlier else None
        if parent is not None:
            data.notes.append(
                f"v{chosen.version} names no registered parent: its flips are shown against v{parent}, "
                "the previous version"
            )
    data.parent = parent
    if parent is not None:
        new = registry.ledger_of(registry.VersionRef(model, chosen.version))
        old = registry.ledger_of(registry.VersionRef(model, parent))
        try:
            flip_explorer(data, listed[chosen.version].run_id, new, old)
            data.per_slice = pair_slice_rows(old, new, SHOWN_CONFIDENCE, MIN_SLICE_N)[:SLICES_PLOTTED]
        except LedgerMismatch as e:
            data.notes.append(f"no flips can be counted against v{parent}: {e}")
        else:
            if data.n_eval == 0:
                data.notes.append(f"v{parent} was evaluated on other samples: no flips can be counted")
            elif data.n_eval < len(new["ids"]):
                data.notes.append(
                    f"flips against v{parent} on the {data.n_eval:,} of {len(new['ids']):,} eval samples "
                    "both were evaluated on"
                )
    return data


def write_report(
    model: str, out: Path, log_to_mlflow: bool = True, version: str | None = None
) -> tuple[Path, ReportData]:
    """Gather, render and write the report (flips of `version`, default the latest); log it to that
    version's run as report/report.html."""
    data = gather(model, version)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_html(data), encoding="utf-8")
    if log_to_mlflow:
        runs.attach(registry.run_of(registry.VersionRef(model, data.version)), out, "report/report.html")
    return out, data


def report_from_store(model: str, out: Path, version: str | None) -> tuple[Path, ReportData]:
    """`write_report` from the MLflow store this environment names (`congruent report`)."""
    from orchestrator.tracking.store import configure

    configure()
    return write_report(model, out, version=version)
