"""`congruent versions MODEL [--matrix] [--slices] [--json]`: the version chain of a registered model,
with each version's ER and flips against its parent, the pairwise NFR matrix from the ledgers, and
flips by slice."""

from __future__ import annotations

import argparse
import json
from typing import Any

from orchestrator.commands.options import fail, json_option
from orchestrator.views.format import percent, short_percent
from orchestrator.views.live import LIVE_HEADERS, live_row


def run(args: argparse.Namespace) -> int:
    from orchestrator.driver.versions import gather_chain

    chain = gather_chain(args.model, args.matrix, args.slices, args.min_slice_n, args.protected)
    if chain is None:
        return fail("versions", f"no registered model {args.model!r}")
    if args.json:
        print(json.dumps(chain.output))
        return 0
    print(chain_table(args.model, chain.records, chain.confidence))
    for r in chain.records:
        if r.chosen:
            print(f"v{r.version} {auto_line(r.chosen, r.candidates)}")
    if chain.incomplete:
        print(
            f"incomplete, their publication interrupted (ignored everywhere else; a rerun of their spec "
            f"discards them): {', '.join(chain.incomplete)}"
        )
    if chain.output["live"]:
        print(live_lines(chain.output["live"], chain.confidence))
    if args.slices:
        print(slice_tables(chain.output["slices"], chain.confidence, args.min_slice_n))
    if args.protected:
        print(protected_lines(chain.output["protected"]))
    if args.matrix:
        print(matrix_lines(chain.output["matrix"]))
    return 0


def chain_table(model: str, records: list[Any], confidence: float) -> str:
    """The versions, each against its parent: ER, NFR and its bound, PFR, the ER increase's bound."""
    from orchestrator.views.tables import table

    cells = [
        [
            r.version,
            r.label,
            r.method_shown,
            r.arch,
            r.parent_shown or "—",
            percent(r.error_rate),
            percent(r.nfr),
            percent(r.nfr_upper),
            percent(r.pfr),
            percent(r.er_increase_upper),
            percent(r.rel_nfr, none="undefined" if r.parent_shown else "—"),  # with a parent: ER 0 or 1
            ",".join(r.aliases),
            r.created,
        ]
        for r in records
    ]
    title = (
        f"{model}: {len(records)} versions (flips against each version's parent; ≤: one-sided "
        f"{short_percent(confidence)} upper bounds of NFR and of the ER increase)"
    )
    headers = ["version", "label", "method", "arch", "parent", "ER", "NFR", "NFR ≤", "PFR", "ΔER ≤", "Rel-NFR"]
    return title + "\n" + table([*headers, "aliases", "created"], cells, left=4)


def live_lines(live: list[Any], confidence: float) -> str:
    """The served champion and its shadowed candidate on real requests."""
    from orchestrator.views.tables import table

    level = short_percent(confidence)
    title = f"\nlive: the served champion and its shadowed candidate on real requests (≤ / ≥: {level} bounds)"
    return title + "\n" + table(LIVE_HEADERS, [live_row(s) for s in live], left=3)


def matrix_lines(m: dict[str, Any]) -> str:
    """The pairwise NFR matrix and the eval samples each pair shares (a warning for versions without a ledger)."""
    from orchestrator.views.tables import table

    lines = []
    if m["without_ledger"]:
        lines.append(f"warning: no ledger in the runs of {', '.join(m['without_ledger'])}: left out of the matrix")
    lines += [
        "\nNFR matrix (rows = old, columns = new), each on the eval samples both versions share",
        table(
            ["old\\new", *m["versions"]],
            [[v, *map(percent, row)] for v, row in zip(m["versions"], m["nfr_matrix"])],
        ),
        "\nshared eval samples (of the row version's classes)",
        table(
            ["old\\new", *m["versions"]],
            [[v, *map(str, row)] for v, row in zip(m["versions"], m["shared_samples"])],
        ),
    ]
    return "\n".join(lines)


SLICES_SHOWN = 8  # the worst slices shown per version and comparison


def slice_tables(slices: dict[str, dict[str, list[dict[str, Any]]]], confidence: float, min_n: int) -> str:
    """Each version's worst slices against its parent and the champion, as tables."""
    from orchestrator.views.tables import slice_table

    if not slices:
        return "\nslices: no version's ledger keeps any (data.slice_columns, data.slices)"
    lines = [
        f"\nworst slices (NFR ≤: one-sided {short_percent(confidence)} upper bound; "
        f"* fewer than {min_n} samples, not gated)"
    ]
    for version, figures in slices.items():
        for key, rows in figures.items():
            against = "its parent" if key == "vs_parent" else "the champion"
            lines += [f"v{version} against {against}:", slice_table(rows, SLICES_SHOWN)]
    return "\n".join(lines)


def protected_lines(suite: dict[str, Any] | None) -> str:
    """Each version on the protected set: right, and flipped against its parent and the champion."""
    from orchestrator.views.tables import table

    if suite is None:
        return "\nprotected: no protected samples (`congruent protect`)"

    def flips(value: int | None) -> str:
        return "—" if value is None else str(value)

    rows = [
        [v["version"], f"{v['correct']} of {v['n']}", flips(v["flipped_vs_parent"]), flips(v["flipped_vs_champion"])]
        for v in suite["versions"]
    ]
    title = f"\nprotected set {suite['set']} ({suite['n']} samples): each version's answers"
    return title + "\n" + table(["version", "right", "flipped vs parent", "flipped vs champion"], rows, left=2)


def auto_line(chosen: str, candidates: tuple[dict[str, Any], ...]) -> str:
    """A version of method auto in one line: each candidate's val NFR and val ER (what it chose on),
    eval NFR, seconds; the chosen one marked; a val slice over the slice gate named."""
    parts = [
        f"{'→ ' if c.get('name') == chosen else ''}{c.get('name')} {percent(c.get('val_nfr'))} "
        f"({percent(c.get('val_error_rate'))}; eval {percent(c.get('nfr'))}, {c.get('seconds', 0):.0f} s"
        + (f"; val slice {c['val_slice_over']}" if c.get("val_slice_over") else "")
        + ")"
        for c in candidates
    ]
    return "auto, val NFR (val ER; eval NFR, seconds) per candidate: " + ", ".join(parts)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "versions", help="the version chain of a registered model, with flips", parents=[json_option()]
    )
    parser.add_argument("model", help="the registered model's name")
    parser.add_argument("--matrix", action="store_true", help="also the pairwise NFR matrix from the ledgers")
    parser.add_argument(
        "--slices",
        action="store_true",
        help="also flips by slice (data.slice_columns, data.slices) of each version against its parent and the "
        "champion, worst first (`slices` in --json)",
    )
    parser.add_argument(
        "--min-slice-n", type=int, default=30, metavar="N", help="samples a slice needs to rank as gated (30)"
    )
    parser.add_argument(
        "--protected",
        action="store_true",
        help="also each version on the protected set (`congruent protect`): right, flipped against its parent "
        "and the champion (`protected` in --json)",
    )
    parser.set_defaults(func=run)
