"""`congruent versions MODEL` and `congruent promote MODEL VERSION`: browse and gate the registry.

    congruent versions fmnist-classifier [--matrix] [--json]
    congruent promote fmnist-classifier 3 --max-nfr 0.02 --max-er-increase 0.0
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from typing import Any

from orchestrator.compare import format_percent, format_table


def _fraction(text: str | None) -> float | None:
    return float(text) if text not in (None, "") else None


def chain(name: str) -> list[dict[str, Any]]:
    """One row per version: lineage, method, ER and flips against the parent, aliases, created."""
    from mlflow import MlflowClient

    from orchestrator import registry

    listed = registry.versions(name)
    aliases: dict[str, list[str]] = {}
    if listed:
        for alias, version in MlflowClient().get_registered_model(name).aliases.items():
            aliases.setdefault(str(version), []).append(alias)
    rows = []
    for mv in listed:
        tags = mv.tags
        rows.append({
            "version": str(mv.version), "label": tags.get("label", ""), "method": tags.get("method", ""),
            "arch": tags.get("arch", ""), "parent_version": tags.get("parent_version") or None,
            "error_rate": _fraction(tags.get("error_rate")), "nfr": _fraction(tags.get("nfr")),
            "pfr": _fraction(tags.get("pfr")), "rel_nfr": _fraction(tags.get("rel_nfr")),
            "fingerprint": tags.get("fingerprint", ""), "aliases": sorted(aliases.get(str(mv.version), [])),
            "created": datetime.datetime.fromtimestamp(mv.creation_timestamp / 1000).isoformat(timespec="seconds"),
        })
    return rows


def run_versions(args: argparse.Namespace) -> int:
    from orchestrator import registry, tracking

    tracking.configure()
    rows = chain(args.model)
    if not rows:
        print(f"congruent versions: error: no registered model {args.model!r}", file=sys.stderr)
        return 2
    output: dict[str, Any] = {"model": args.model, "versions": rows}
    if args.matrix:
        names, matrix = registry.chain_matrix(args.model, rows[-1]["fingerprint"])
        output["matrix"] = {"versions": names, "nfr_matrix": matrix, "fingerprint": rows[-1]["fingerprint"]}
    if args.json:
        print(json.dumps(output))
        return 0
    table = [[r["version"], r["label"], r["method"], r["arch"], r["parent_version"] or "-",
              format_percent(r["error_rate"]), format_percent(r["nfr"]), format_percent(r["pfr"]),
              format_percent(r["rel_nfr"]), ",".join(r["aliases"]), r["created"]] for r in rows]
    print(f"{args.model}: {len(rows)} versions (flips against each version's parent)")
    print("\n".join(format_table(["version", "label", "method", "arch", "parent", "ER", "NFR", "PFR",
                                  "Rel-NFR", "aliases", "created"], table, left=4)))
    if args.matrix:
        m = output["matrix"]
        print(f"\nNFR matrix (rows = old, columns = new) on eval split {m['fingerprint']}")
        print("\n".join(format_table(["old\\new", *m["versions"]],
                                     [[v, *map(format_percent, row)] for v, row in zip(m["versions"], m["nfr_matrix"])])))
    return 0


def run_promote(args: argparse.Namespace) -> int:
    from mlflow.exceptions import MlflowException

    from orchestrator import registry, tracking

    tracking.configure()
    try:
        registry.resolve(f"{args.model}/{args.version}")
        passed, why = registry.gate(args.model, args.version, args.max_nfr, args.max_er_increase)
    except (registry.RegistryError, MlflowException) as e:
        print(f"congruent promote: error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    if not passed:
        print(f"{args.model} v{args.version} NOT promoted: {why}", file=sys.stderr)
        return 1
    registry.set_champion(args.model, args.version)
    print(f"{args.model} v{args.version} is now champion: {why}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    versions = subparsers.add_parser("versions", help="the version chain of a registered model, with flips")
    versions.add_argument("model")
    versions.add_argument("--matrix", action="store_true", help="also the pairwise NFR matrix from the ledgers")
    versions.add_argument("--json", action="store_true")
    versions.set_defaults(func=run_versions)
    promote = subparsers.add_parser("promote", help="move alias champion to a version that passes the gate")
    promote.add_argument("model")
    promote.add_argument("version")
    promote.add_argument("--max-nfr", type=float, required=True, help="largest NFR against the champion (fraction)")
    promote.add_argument("--max-er-increase", type=float, default=0.0,
                         help="largest ER increase over the champion (fraction; default 0)")
    promote.set_defaults(func=run_promote)
