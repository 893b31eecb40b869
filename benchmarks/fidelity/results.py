"""From saved logits to the benchmark's numbers: pure functions, metrics from workers.metrics.

An ensemble's logits are the mean of its members' logits, φ_ens = (1/m) Σ_i φ^(i) (as in
FrozenModels); a single model is an ensemble of one. Over seeds every number is mean ± sample
standard deviation (ddof = 1; 0 with one seed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from benchmarks.fidelity.trainings import Layout, Row
from workers.metrics import UpdateReport, error_rate, nfr_matrix, update_report

METRICS = ("er_old", "er_new", "nfr", "rel_nfr", "pfr")
ER_SLACK = 0.003  # ELODI's ER may exceed no treatment's by 0.3 points
NFR_VS_NONE = 0.6
NFR_VS_PARAGON = 1.15
GAP_CLOSED = 0.9  # ELODI's target share of the none → paragon NFR gap (the paper: 93 % on ImageNet)


def ensemble(logits: Mapping[str, np.ndarray], names: Sequence[str]) -> np.ndarray:
    """φ_ens = (1/m) Σ_i φ^(i): the mean of the named models' logits."""
    return np.mean([logits[name] for name in names], axis=0)


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """(mean, sample std with ddof = 1); std is 0 for a single value."""
    array = np.asarray(values, dtype=float)
    return float(array.mean()), float(array.std(ddof=1)) if len(array) > 1 else 0.0


def summarise(reports: Sequence[Mapping[str, Any]]) -> dict[str, tuple[float, float] | None]:
    """Mean ± std of each metric over seeds; None where a seed's value is undefined (Rel-NFR)."""
    summary = {}
    for metric in METRICS:
        values = [report[metric] for report in reports]
        summary[metric] = None if any(v is None for v in values) else mean_std(values)
    return summary


def row_report(row: Row, logits: Mapping[str, np.ndarray], labels: np.ndarray) -> UpdateReport:
    """update_report of the row's old ensemble → new ensemble."""
    return update_report(ensemble(logits, row.old), ensemble(logits, row.new), labels)


def gap_closed(nfr: float, none: float, paragon: float) -> float | None:
    """(NFR_none − NFR) / (NFR_none − NFR_paragon): the share of the no-treatment → paragon gap a
    method closes (1: the paragon's NFR, 0: no treatment's); None when there is no gap."""
    return None if none == paragon else (none - nfr) / (none - paragon)


def main_table(layout: Layout, logits: Mapping[str, np.ndarray], labels: np.ndarray) -> list[dict[str, Any]]:
    """One entry per method: {method, per_seed: [reports], **summary, gap_closed: mean ± std over
    seeds of each seed's gap closed (against that seed's none and paragon rows)}."""
    seeds = sorted(layout.rows)
    reports = {
        index: [row_report(layout.rows[s][index], logits, labels) for s in seeds]
        for index in range(len(layout.rows[seeds[0]]))
    }
    methods = [row.method for row in layout.rows[seeds[0]]]
    return table_of(methods, [reports[index] for index in range(len(methods))])


def table_of(methods: Sequence[str], reports: Sequence[Sequence[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """The main table from each method's per-seed reports (`reports[i]`: method i, one per seed)."""
    none = reports[methods.index("none")]
    paragon = reports[next(i for i, m in enumerate(methods) if m.startswith("paragon"))]
    table = []
    for index, method in enumerate(methods):
        gaps = [gap_closed(r["nfr"], n["nfr"], p["nfr"]) for r, n, p in zip(reports[index], none, paragon)]
        defined = [gap for gap in gaps if gap is not None]
        table.append(
            {
                "method": method,
                "per_seed": reports[index],
                **summarise(reports[index]),
                "gap_closed": mean_std(defined) if len(defined) == len(gaps) else None,
            }
        )
    return table


def chain_table(layout: Layout, logits: Mapping[str, np.ndarray], labels: np.ndarray) -> dict[str, dict]:
    """Pairwise NFR matrix M[i][j] (NFR of version j w.r.t. version i) of each chain, mean and std over seeds,
    with each version's error rate; empty when the mode plans no chain."""
    result: dict[str, dict] = {}
    if not layout.chains:
        return result
    for chain in ("plain", "elodi"):
        versions = [[ensemble(logits, (name,)) for name in layout.chains[s][chain]] for s in sorted(layout.chains)]
        matrices = np.array([nfr_matrix(v, labels) for v in versions])
        errors = np.array([[error_rate(x, labels) for x in v] for v in versions])
        result[chain] = {
            "nfr_mean": matrices.mean(axis=0).tolist(),
            "nfr_std": (matrices.std(axis=0, ddof=1) if len(matrices) > 1 else 0 * matrices[0]).tolist(),
            "er_mean": errors.mean(axis=0).tolist(),
        }
    return result


def curve_table(layout: Layout, logits: Mapping[str, np.ndarray], labels: np.ndarray) -> list[dict[str, Any]]:
    """For each ensemble size m: paragon and ELODI (both ends) summaries over seeds."""
    seeds = sorted(layout.curves)
    table = []
    for m in [m for m in layout.plan.mode.curve if all(m in layout.curves[s] for s in seeds)]:
        entry: dict[str, Any] = {"m": m, "per_seed": {}}
        for kind in ("paragon", "elodi"):
            entry["per_seed"][kind] = [row_report(layout.curves[s][m][kind], logits, labels) for s in seeds]
            entry[kind] = summarise(entry["per_seed"][kind])
        table.append(entry)
    return table


def _by_method(table: Sequence[Mapping[str, Any]], prefix: str) -> Mapping[str, Any]:
    return next(entry for entry in table if entry["method"].startswith(prefix))


def verdicts(table: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The issue's targets checked on the means: for each ELODI row, NFR ≤ 0.6 × none, NFR ≤ 1.15 ×
    paragon, ER_new ≤ ER_new(none) + 0.3 pt; FD-KL and FD-LM NFR < none."""
    none, paragon = _by_method(table, "none"), _by_method(table, "paragon")
    checks = []
    for entry in table:
        if "elodi" not in entry["method"]:
            continue
        nfr, er = entry["nfr"][0], entry["er_new"][0]
        checks += [
            {
                "row": entry["method"],
                "target": f"NFR ≤ {NFR_VS_NONE} × none",
                "value": nfr / none["nfr"][0],
                "met": nfr <= NFR_VS_NONE * none["nfr"][0],
                "unit": "× none",
            },
            {
                "row": entry["method"],
                "target": f"NFR ≤ {NFR_VS_PARAGON} × paragon",
                "value": nfr / paragon["nfr"][0],
                "met": nfr <= NFR_VS_PARAGON * paragon["nfr"][0],
                "unit": "× paragon",
            },
            {
                "row": entry["method"],
                "target": "ER ≤ none + 0.3 pt",
                "value": 100 * (er - none["er_new"][0]),
                "met": er <= none["er_new"][0] + ER_SLACK,
                "unit": "pt vs none",
            },
        ]
        if entry.get("gap_closed") is not None:
            closed = entry["gap_closed"][0]
            checks.append(
                {
                    "row": entry["method"],
                    "target": f"closes ≥ {GAP_CLOSED:.0%} of the none → paragon gap",
                    "value": 100 * closed,
                    "met": closed >= GAP_CLOSED,
                    "unit": "% of the gap",
                }
            )
    for method in [m for m in ("fd-kl", "fd-lm") if any(e["method"].startswith(m) for e in table)]:
        entry = _by_method(table, method)
        checks.append(
            {
                "row": method,
                "target": "NFR < none",
                "value": entry["nfr"][0] / none["nfr"][0],
                "met": entry["nfr"][0] < none["nfr"][0],
                "unit": "× none",
            }
        )
    return checks


def fine_tuning_verdicts(table: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The targets on a from-old table that do not compare with its paragon (m fine-tunes of one model)."""
    return [check for check in verdicts(table) if check["unit"] != "× paragon"]


def results(layout: Layout, logits: Mapping[str, np.ndarray], labels: np.ndarray) -> dict[str, Any]:
    """Every number of one split: main table, verdicts, chains, NFR vs m; for a fine-tuning mode, the
    main table again with the new models started from the plain old model (`from_old`, its verdicts)."""
    table = main_table(layout, logits, labels)
    numbers = {
        "table": table,
        "verdicts": verdicts(table),
        "chain": chain_table(layout, logits, labels),
        "curve": curve_table(layout, logits, labels),
    }
    if layout.from_old:  # no gap: m fine-tunes of one old model are no paragon (see the report)
        from_old = [
            {**e, "gap_closed": None} for e in main_table(replace(layout, rows=layout.from_old), logits, labels)
        ]
        numbers |= {"from_old": from_old, "from_old_verdicts": fine_tuning_verdicts(from_old)}
    return numbers


def merge(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One split's numbers from runs on disjoint seeds (`--first-seed` on separate machines): per-seed
    reports put together, then summarised as one run would. Methods and curve points missing from a
    run are left out; a run from before curves kept their per-seed reports holds one seed, whose
    summary mean is that seed's report."""
    table = _merged_table([record["table"] for record in records])
    curves = []
    for m in [entry["m"] for entry in records[0]["curve"]]:
        found = [next((e for e in record["curve"] if e["m"] == m), None) for record in records]
        points = [point for point in found if point is not None]
        if len(points) < len(records):
            continue
        entry: dict[str, Any] = {"m": m, "per_seed": {}}
        for kind in ("paragon", "elodi"):
            entry["per_seed"][kind] = [
                report for point in points for report in point.get("per_seed", {}).get(kind, [_one_seed(point[kind])])
            ]
            entry[kind] = summarise(entry["per_seed"][kind])
        curves.append(entry)
    merged = {"table": table, "verdicts": verdicts(table), "chain": {}, "curve": curves}
    if all("from_old" in record for record in records):
        from_old = [{**e, "gap_closed": None} for e in _merged_table([record["from_old"] for record in records])]
        merged |= {"from_old": from_old, "from_old_verdicts": fine_tuning_verdicts(from_old)}
    return merged


def _merged_table(tables: Sequence[Sequence[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """One main table from several runs' tables on disjoint seeds: the methods every run has."""
    by_method = [{entry["method"]: entry["per_seed"] for entry in table} for table in tables]
    methods = [method for method in by_method[0] if all(method in t for t in by_method)]
    return table_of(methods, [[report for t in by_method for report in t[method]] for method in methods])


def _one_seed(summary: Mapping[str, Any]) -> dict[str, Any]:
    """A one-seed summary's values as that seed's report."""
    return {metric: None if summary[metric] is None else summary[metric][0] for metric in METRICS}
