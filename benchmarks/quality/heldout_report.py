"""The held-out sets of benchmarks/quality/heldout.py (where each is, how its section and results are
named) and how a set's results are written up: each unit's verdict against issue 72's target
(the shipped NFR ≤ 0.7× no treatment's at an ER ≤ no treatment's + 0.5 pt) and the section's table."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.quality.baselines_grid import short_name
from benchmarks.report import RESULTS_DIR, markdown_table

MAX_RATIO, MAX_ER_INCREASE = 0.7, 0.005


@dataclass(frozen=True)
class HeldoutSet:
    """A held-out set: where it is, how its section and results are named, what its samples are."""

    csv: str  # the name of its path in workers.data.text_tables
    section: str
    results: Path
    description: str  # the report's sentence, with {n_eval}
    samples: str  # what one sample is called in the table ("tweets", "lines")
    eval_limit: int | None = None


SETS = {
    "election": HeldoutSet(
        "ELECTION_TWEETS_CSV",
        "## Method auto on a held-out text set: the 2016 election tweets",
        RESULTS_DIR / "heldout-results.json",
        "the 2016 election tweets by author (2 classes, {n_eval} regression-eval tweets, a val split of its own "
        "that `train_limit` does not cut)",
        "tweets",
    ),
    "friends": HeldoutSet(
        "FRIENDS_CSV",
        "## Method auto on a second held-out text set: Friends' lines by speaker",
        RESULTS_DIR / "heldout-friends-results.json",
        "the lines of Friends' six friends by speaker (6 classes, the first {n_eval:,} regression-eval lines by "
        "the limit's hash: `eval_limit` 3,000 of about 10,200; a val split of its own that `train_limit` does not cut)",
        "lines",
        eval_limit=3000,
    ),
    "sotu": HeldoutSet(
        "SOTU_CSV",
        "## Method auto on a third held-out text set: State of the Union sentences by party",
        RESULTS_DIR / "heldout-sotu-results.json",
        "the sentences of the State of the Union addresses of Democratic and Republican presidents "
        "(1829–2021) by the president's party (2 classes, the first {n_eval:,} regression-eval sentences "
        "by the limit's hash: `eval_limit` 3,000; a val split of its own that `train_limit` does not cut), "
        "installed for these runs and read by nothing before them",
        "sentences",
        eval_limit=3000,
    ),
    "spam": HeldoutSet(
        "SPAM_CSV",
        "## Method auto on a fourth held-out text set: SpamAssassin's emails",
        RESULTS_DIR / "heldout-spam-results.json",
        "SpamAssassin's public mail corpus (2002), each email's subject and text body labelled ham or spam "
        "(2 classes, {n_eval:,} regression-eval emails, a val split of its own that `train_limit` does not cut), "
        "installed for benchmarks/quality/harm.py and read by nothing before it",
        "emails",
    ),
}


def by_name(unit: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in unit["candidates"]}


def verdict(unit: dict[str, Any]) -> tuple[float, float, bool]:
    """(shipped NFR / no treatment's, ER increase, target met) on the eval split."""
    candidates = by_name(unit)
    none, shipped = candidates["none"], candidates[unit["chosen"]]
    ratio = shipped["nfr"] / none["nfr"] if none["nfr"] else float("inf")
    increase = shipped["error_rate"] - none["error_rate"]
    return ratio, increase, ratio <= MAX_RATIO and increase <= MAX_ER_INCREASE + 1e-12


def percent(value: float) -> str:
    return f"{100 * value:.2f} %"


def limit_key(train_limit: int | None) -> str:
    return str(train_limit)


def unit_key(arch: str, seed: int, train_limit: int | None, max_er_increase: float | None = None) -> str:
    """A unit's name in the results: the defaults' as before, a series with auto's own bound marked."""
    return f"{arch}/{seed}/{train_limit}" + ("" if max_er_increase is None else f"/max_er_increase={max_er_increase:g}")


def report_rows(units: list[dict[str, Any]], base: dict[str, Any]) -> list[list[str]]:
    rows = []
    size = f"{base['old_train_samples']:,} → {base['train_samples']:,}"
    for unit in units:
        candidates = by_name(unit)
        none, shipped = candidates["none"], candidates[unit["chosen"]]
        ratio, increase, kept = verdict(unit)
        others = ", ".join(
            f"{c['name']} {percent(c['nfr'])}" for c in unit["candidates"] if c["name"] not in ("none", unit["chosen"])
        )
        rows.append(
            [
                f"`{short_name(unit['arch'])}`"
                + (f", budget {unit['budget']}" if unit.get("budget") else "")
                + (f", auto's bound +{100 * unit['max_er_increase']:g} pt" if "max_er_increase" in unit else ""),
                size,
                str(unit["seed"]),
                percent(unit["v1_error_rate"]),
                f"{percent(none['error_rate'])}, **{percent(none['nfr'])}**",
                unit["chosen"],
                f"{percent(shipped['error_rate'])}, **{percent(shipped['nfr'])}**",
                f"{ratio:.2f}×",
                f"{100 * increase:+.2f} pt",
                "met" if kept else "**missed**",
                others,
                f"{unit['seconds'] / 60:.1f} min",
            ]
        )
    rows.append(
        [
            "TF-IDF + LR (C 4)",
            size,
            "",
            percent(base["old_error_rate"]),
            f"{percent(base['error_rate'])}, **{percent(base['nfr'])}**",
            "",
            "",
            "",
            "",
            "",
            "",
            "",
        ]
    )
    return rows


def report(results: dict[str, Any], heldout: str = "election") -> str:
    """The section: a table per training size (every unit run at it, and the baseline's line)."""
    units = sorted(
        results["units"].values(),
        key=lambda u: (-(u["train_limit"] or 10**9), u.get("max_er_increase", -1), u["arch"], u["seed"]),
    )
    rows = []
    for key, base in sorted(results["baselines"].items(), key=lambda kv: -(kv[1]["train_limit"] or 10**9)):
        rows += report_rows([u for u in units if limit_key(u["train_limit"]) == key], base)
    table = markdown_table(
        [
            "arch",
            f"v1 → v2 {SETS[heldout].samples}",
            "seed",
            "v1 ER",
            "no treatment: ER, NFR",
            "auto shipped",
            "shipped: ER, NFR",
            "NFR ratio",
            "ER change",
            "target",
            "the other candidates' NFR",
            "wall",
        ],
        rows,
    )
    met = sum(verdict(u)[2] for u in units)
    n_eval = units[0]["n_eval"] if units else 0
    option = "" if heldout == "election" else f"--set {heldout} "
    jobs = results.get("jobs")  # recorded since the Friends runs, which had the machine to themselves
    return (
        f"Command: `python -m benchmarks.quality.heldout {option}[--train-limit N]`, {results['date']}, 2 CPU cores, "
        + (
            "one unit at a time (the wall column is under the load of other benchmarks). "
            if jobs is None
            else f"{jobs} unit{'s' if jobs > 1 else ''} at a time, nothing else running. "
        )
        + f"The set: {SETS[heldout].description.format(n_eval=n_eval)}, which no recipe, α or auto default "
        "was chosen on. v1: the "
        "architecture with its defaults on the first half of the training split (all of it, or its first "
        "`--train-limit`); v2: all of it, `method: {name: auto}` and nothing else set. Figures on the "
        "regression-eval split against v1; auto chose on the val split. The baseline's line: TF-IDF word "
        "1–2-grams + logistic regression (C 4) fitted on the same halves (ER v1, then ER and NFR v1 → v2; "
        "deterministic: one fit)."
        + (
            " Rows marked with auto's bound set it in v2's spec (`method: {name: auto, max_er_increase: F}`) "
            "instead of the default +0.3 pt."
            if any("max_er_increase" in u for u in units)
            else ""
        )
        + "\n\n"
        f"{table}\n\n"
        f"Target: shipped NFR ≤ {MAX_RATIO}× no treatment's at ER ≤ no treatment's + {100 * MAX_ER_INCREASE:g} pt: "
        f"met in {met} of {len(units)} runs.\n"
    )
