"""`congruent versions MODEL [--matrix] [--json]`: the version chain of a registered model, with
each version's ER and flips against its parent, and the pairwise NFR matrix from the ledgers."""

from __future__ import annotations

import argparse
import json
from typing import Any

from orchestrator.commands.options import fail, json_option
from orchestrator.views.format import percent
from orchestrator.views.live import LIVE_HEADERS, live_row


def run(args: argparse.Namespace) -> int:
    from orchestrator.tracking import registry, store
    from orchestrator.tracking.live import live_summaries
    from orchestrator.tracking.version_record import SHOWN_CONFIDENCE
    from orchestrator.views.tables import table

    store.configure()
    records = registry.chain(args.model)
    incomplete = [str(mv.version) for mv in registry.versions(args.model, incomplete=True)]
    if not records and not incomplete:
        return fail("versions", f"no registered model {args.model!r}")
    output: dict[str, Any] = {"model": args.model, "versions": [r.row() for r in records], "incomplete": incomplete}
    if args.matrix:
        names, matrix, shared = registry.chain_matrix(args.model)
        output["matrix"] = {"versions": names, "nfr_matrix": matrix, "shared_samples": shared}
        output["matrix"]["without_ledger"] = [r.version for r in records if r.version not in names]
    output["live"] = live_summaries(args.model, SHOWN_CONFIDENCE)
    if args.json:
        print(json.dumps(output))
        return 0
    cells = [
        [
            r.version,
            r.label,
            r.method_shown,
            r.arch,
            r.parent_version or "—",
            percent(r.error_rate),
            percent(r.nfr),
            percent(r.nfr_upper),
            percent(r.pfr),
            percent(r.er_increase_upper),
            percent(r.rel_nfr, none="undefined" if r.parent_version else "—"),  # with a parent: ER 0 or 1
            ",".join(r.aliases),
            r.created,
        ]
        for r in records
    ]
    print(
        f"{args.model}: {len(records)} versions (flips against each version's parent; ≤: one-sided "
        f"{100 * SHOWN_CONFIDENCE:g} % upper bounds of NFR and of the ER increase)"
    )
    headers = ["version", "label", "method", "arch", "parent", "ER", "NFR", "NFR ≤", "PFR", "ΔER ≤", "Rel-NFR"]
    print(
        table(
            [*headers, "aliases", "created"],
            cells,
            left=4,
        )
    )
    for r in records:
        if r.chosen:
            print(f"v{r.version} {auto_line(r.chosen, r.candidates)}")
    if incomplete:
        print(
            f"incomplete, their publication interrupted (ignored everywhere else; a rerun of their spec "
            f"discards them): {', '.join(incomplete)}"
        )
    if output["live"]:
        level = f"{100 * SHOWN_CONFIDENCE:g} %"
        print(f"\nlive: the served champion and its shadowed candidate on real requests (≤ / ≥: {level} bounds)")
        print(table(LIVE_HEADERS, [live_row(s) for s in output["live"]], left=3))
    if args.matrix:
        m = output["matrix"]
        if m["without_ledger"]:
            print(f"warning: no ledger in the runs of {', '.join(m['without_ledger'])}: left out of the matrix")
        print("\nNFR matrix (rows = old, columns = new), each on the eval samples both versions share")
        print(
            table(
                ["old\\new", *m["versions"]],
                [[v, *map(percent, row)] for v, row in zip(m["versions"], m["nfr_matrix"])],
            )
        )
        print("\nshared eval samples (of the row version's classes)")
        print(
            table(
                ["old\\new", *m["versions"]],
                [[v, *map(str, row)] for v, row in zip(m["versions"], m["shared_samples"])],
            )
        )
    return 0


def auto_line(chosen: str, candidates: tuple[dict[str, Any], ...]) -> str:
    """A version of method auto in one line: each candidate's val NFR and val ER (what it chose on),
    eval NFR, seconds; the chosen one marked."""
    parts = [
        f"{'→ ' if c.get('name') == chosen else ''}{c.get('name')} {percent(c.get('val_nfr'))} "
        f"({percent(c.get('val_error_rate'))}; eval {percent(c.get('nfr'))}, {c.get('seconds', 0):.0f} s)"
        for c in candidates
    ]
    return "auto, val NFR (val ER; eval NFR, seconds) per candidate: " + ", ".join(parts)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "versions", help="the version chain of a registered model, with flips", parents=[json_option()]
    )
    parser.add_argument("model", help="the registered model's name")
    parser.add_argument("--matrix", action="store_true", help="also the pairwise NFR matrix from the ledgers")
    parser.set_defaults(func=run)
