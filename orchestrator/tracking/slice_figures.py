"""Flips by slice between registered versions, from their ledgers (workers/slices.py): each pair
counted on the eval samples both hold, of the classes the older knows (as the NFR matrix counts a
pair), within the slice values the newer version's ledger keeps (`data.slice_columns`, `data.slices`)."""

from __future__ import annotations

from typing import Any

from orchestrator.tracking.ledger import COMPARED, known_mask, read_ledger, shared_samples
from orchestrator.tracking.registry import ledger_path, versions
from workers.slices import slice_flip_counts, slice_rows

SLICED = (*COMPARED, "slices")  # what a slice comparison reads of a ledger


def pair_slice_rows(old: dict[str, Any], new: dict[str, Any], confidence: float, min_n: int) -> list[dict[str, Any]]:
    """The slices of `new` against `old` (ledgers read with SLICED or COMPARED; `new` with its
    slices), worst first; [] when `new` keeps none."""
    if not new.get("slices"):
        return []
    in_old, in_new = shared_samples(old, new)
    labels = new["labels"][in_new]
    known = known_mask(old, labels)
    values = {column: column_values[in_new][known] for column, column_values in new["slices"].items()}
    counts = slice_flip_counts(old["class_ids"][in_old][known], new["class_ids"][in_new][known], labels[known], values)
    return slice_rows(counts, confidence, min_n)


def chain_slices(
    name: str, parents: dict[str, str | None], champion: str | None, confidence: float, min_n: int
) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """{version: {"vs_parent": rows, "vs_champion": rows}} of every version of `name` whose ledger
    keeps slices (`parents`: each version's parent version; a pair whose other ledger is missing or
    by position is left out)."""
    ledgers: dict[str, dict[str, Any]] = {}
    for mv in versions(name):
        path = ledger_path(mv.run_id, mv.tags)
        if path is not None:
            ledgers[str(mv.version)] = read_ledger(path, SLICED)
    out: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for version, ledger in ledgers.items():
        if not ledger.get("slices") or ledger["positional"]:
            continue
        figures: dict[str, list[dict[str, Any]]] = {}
        for key, other in (("vs_parent", parents.get(version)), ("vs_champion", champion)):
            if other is not None and other != version and other in ledgers and not ledgers[other]["positional"]:
                figures[key] = pair_slice_rows(ledgers[other], ledger, confidence, min_n)
        out[version] = figures
    return out
