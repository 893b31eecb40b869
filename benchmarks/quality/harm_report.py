"""The harm-and-help benchmark's figures (benchmarks/quality/harm.py runs it): each run's shipped
candidate against auto's own no-treatment candidate on the regression-eval split, the runs pooled
per architecture (and per demo), the section of docs/benchmarks/quality.md and docs/results/harm.png,
all from the results file alone.

Flips are counted as auto.json's eval NFR times the eval samples of the classes v1 knows (`n_known`:
auto.json's `nfr` is a fraction of those, orchestrator/driver/auto.py `score_on_eval`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.report import RESULTS_DIR, markdown_table

HEADING = "## Harm and help: method auto against no treatment on every held-out set and the demos"
RESULTS = RESULTS_DIR / "harm-results.json"
PLOT = RESULTS_DIR / "harm.png"
HARM_ER = 0.005  # a run harms when the shipped eval ER exceeds no treatment's by more than this, or its NFR does
MINILM_NAME = "hf:all-MiniLM-L6-v2"
NFR_TARGETS = {"text-bag": 0.8, "text-linear": 0.8, MINILM_NAME: 0.6}  # the pooled ratio's (issue 92)
WALL_TARGET = 4.0  # auto's wall against a plain update's, for the small models (not MiniLM)
# written before any run on it: what auto was expected to do on the set nobody had read
EXPECTED = (
    "**Expected on SpamAssassin's emails, written before any run on them.** 5,910 emails (4,110 ham, 1,800 "
    "spam; subject and text body, headers dropped, cut at 4,000 characters), split 4,261 train (v1: 2,130), "
    "456 val and 1,193 eval. An easy set for a bag of words: v2's ER about 1–3 %, no treatment flipping "
    "about 0.5–1.5 % of the eval emails (6 to 18 flips), so each run's NFR ratio moves by 0.1× per flip. "
    "For `text-bag` and `text-linear` no treatment trains in seconds, so auto cross-fits KD, FD-LM and BCWI "
    "on 5 folds of the 4,717 labelled emails (about 2,100 effective samples after the design effect 2.25); "
    "at that size the ER bound reaches +0.3 pt only when a candidate disagrees with no treatment on fewer "
    "than about 30 emails, and two models near 2 % ER disagree on more. So I expect KD, first in the fixed "
    "order, to fail its ER bound in most runs and stop the testing: no treatment ships in 4 or more of the "
    "6 small-model runs, a candidate (BCWI or KD) in the rest, harm in 0 runs, the pooled NFR ratio 0.8–1.0× "
    "(missing ≤ 0.8×). MiniLM at 1,000 emails trains no treatment in more than 2 minutes, is tested on the "
    "456 val emails alone and cannot prove anything there: no treatment in 3 of 3, 1.00×. Auto's wall 5–10× "
    "a plain update's for the small models (20 fold trainings, the candidates and the ELODI pair's replicas "
    "against one training)."
)


@dataclass(frozen=True)
class RunFigures:
    """One run: the shipped candidate against no treatment on the eval split, and the wall times."""

    shipped: str
    er_change: float  # shipped eval ER − no treatment's
    flips: int  # the shipped version's negative flips against v1
    none_flips: int
    auto_seconds: float
    plain_seconds: float

    @property
    def ratio(self) -> float:
        """Shipped NFR / no treatment's (1 when neither flips, ∞ when only the shipped one does)."""
        if self.none_flips == 0:
            return 1.0 if self.flips == 0 else math.inf
        return self.flips / self.none_flips

    @property
    def harm(self) -> bool:
        """ER more than HARM_ER above no treatment's, or more flips than no treatment's."""
        return self.er_change > HARM_ER + 1e-12 or self.flips > self.none_flips


def unit_key(set_name: str, arch: str, seed: int, train_limit: int | None) -> str:
    """A unit's name in the results: `SET/ARCH/SEED/LIMIT`; a demo's `demo-WHICH/SEED` (its size is its own)."""
    return f"{set_name}/{seed}" if set_name.startswith("demo-") else f"{set_name}/{arch}/{seed}/{train_limit}"


def run_figures(unit: dict[str, Any]) -> RunFigures:
    """A unit's shipped candidate against its no treatment (flips: eval NFR × `n_known`)."""
    by_name = {c["name"]: c for c in unit["candidates"]}
    none, shipped = by_name["none"], by_name[unit["chosen"]]
    n = unit["n_known"]
    return RunFigures(
        unit["chosen"],
        shipped["error_rate"] - none["error_rate"],
        round(shipped["nfr"] * n),
        round(none["nfr"] * n),
        unit["auto_seconds"],
        unit["plain_seconds"],
    )


def group(unit: dict[str, Any]) -> str:
    """What a run is pooled with: its architecture, or its demo."""
    return unit["arch"] if unit["kind"] == "set" else f"{unit['set']} ({unit['arch']})"


@dataclass(frozen=True)
class Pooled:
    """A group's runs pooled: how many harmed, Σ shipped flips / Σ no treatment's, Σ auto wall / Σ plain wall."""

    name: str
    runs: int
    harmed: int
    flips: int
    none_flips: int
    auto_seconds: float
    plain_seconds: float

    @property
    def ratio(self) -> float:
        return self.flips / self.none_flips if self.none_flips else (1.0 if self.flips == 0 else math.inf)

    @property
    def wall(self) -> float:
        return self.auto_seconds / self.plain_seconds if self.plain_seconds else math.inf


def pooled(units: Sequence[dict[str, Any]]) -> list[Pooled]:
    """Each group's runs pooled, the architectures first (as NFR_TARGETS orders them), then the demos."""
    order = {name: i for i, name in enumerate(NFR_TARGETS)}
    names = sorted({group(u) for u in units}, key=lambda g: (order.get(g, len(order)), g))
    rows = []
    for name in names:
        figures = [run_figures(u) for u in units if group(u) == name]
        rows.append(
            Pooled(
                name,
                len(figures),
                sum(f.harm for f in figures),
                sum(f.flips for f in figures),
                sum(f.none_flips for f in figures),
                sum(f.auto_seconds for f in figures),
                sum(f.plain_seconds for f in figures),
            )
        )
    return rows


def times(value: float) -> str:
    return "∞" if math.isinf(value) else f"{value:.2f}×"


def pooled_table(rows: Sequence[Pooled]) -> str:
    def nfr_target(name: str) -> str:
        target = NFR_TARGETS.get(name, 0.8)  # a demo's: its promise's 0.8×
        return f"≤ {target}×: {'met' if rows_by[name].ratio <= target else '**missed**'}"

    def wall_target(name: str) -> str:
        if name == MINILM_NAME:
            return "—"
        return f"≤ {WALL_TARGET:g}×: {'met' if rows_by[name].wall <= WALL_TARGET else '**missed**'}"

    rows_by = {r.name: r for r in rows}
    body = [
        [
            f"`{r.name}`",
            str(r.runs),
            str(r.harmed) if not r.harmed else f"**{r.harmed}**",
            f"{r.flips} / {r.none_flips} = {times(r.ratio)}",
            nfr_target(r.name),
            f"{r.auto_seconds / 60:.1f} / {r.plain_seconds / 60:.1f} min = {times(r.wall)}",
            wall_target(r.name),
        ]
        for r in rows
    ]
    headers = ["runs of", "runs", "harm", "pooled NFR ratio (Σ flips)", "target", "auto's wall / plain", "target"]
    return markdown_table(headers, body)


def run_rows(units: Sequence[dict[str, Any]]) -> list[list[str]]:
    rows = []
    for u in units:
        f = run_figures(u)
        none = next(c for c in u["candidates"] if c["name"] == "none")
        shipped = next(c for c in u["candidates"] if c["name"] == u["chosen"])
        size = f"{u['old_train_samples']:,} → {u['train_samples']:,}" if u["kind"] == "set" else "the demo's"
        evidence = f"{u['cross_fit']['folds']} folds" if u.get("cross_fit") else "val"
        promise = "" if u["kind"] == "set" else ("kept" if all(ok for _, ok in u["promise"]) else "**missed**")
        rows.append(
            [
                u["set"],
                f"`{u['arch']}`" + (f", budget {u['budget']}" if u.get("budget") else ""),
                size,
                str(u["seed"]),
                evidence,
                f"{100 * none['error_rate']:.2f} %, {f.none_flips} / {u['n_known']:,}",
                f.shipped,
                f"{100 * shipped['error_rate']:.2f} %, {f.flips}",
                f"{100 * f.er_change:+.2f} pt",
                times(f.ratio),
                "**yes**" if f.harm else "no",
                promise,
                f"{f.auto_seconds:.0f} s",
                f"{f.plain_seconds:.0f} s",
                times(f.auto_seconds / f.plain_seconds if f.plain_seconds else math.inf),
            ]
        )
    return rows


def ordered(units: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs as the table lists them: sets, then demos; by set, architecture, size and seed."""
    return sorted(
        units, key=lambda u: (u["kind"] != "set", u["set"], u["arch"], -(u["train_limit"] or 10**9), u["seed"])
    )


def report(results: dict[str, Any], plot_link: str = f"../results/{PLOT.name}") -> str:
    """The section, from the results file alone (`plot_link`: the plot as the page links it)."""
    units = ordered(list(results["units"].values()))
    head = (
        "Command: `python -m benchmarks.quality.harm --report docs/benchmarks/quality.md` (`--sets`, `--archs`, "
        "`--seeds`, `--demos`, `--train-limit N`, `--jobs` pick a subset; recorded runs are kept and not rerun). "
        "Per run: v1 with its defaults on half the training split, v2 on all of it with `method: auto` and "
        "nothing else set (the demos: their own specs, orchestrator/driver/demo.py), and one plain update (v2's "
        "spec with `method: none`, its own checkpoint store) whose wall time is auto's denominator. Figures on "
        "the regression-eval split against v1; the shipped candidate is compared with auto's own no-treatment "
        "candidate. Harm: the shipped version's eval ER more than +0.5 pt above no treatment's, or more flips "
        "than no treatment's. Flips: eval NFR × the eval samples of v1's classes. Sizes: the small models on "
        "all of the election tweets and SpamAssassin's emails and on 8,000 of Friends' lines and the State of "
        "the Union sentences; MiniLM on 1,000 of each, with auto's budget 4 (no treatment, KD, FD-LM, BCWI), "
        "unless `--train-limit` set every unit's."
    )
    if not units:
        return f"{head}\n\n{EXPECTED}\n\nNo run recorded yet.\n"
    when = (
        f"Last run {results['date']} on {results['machine']}, {results['jobs']} unit"
        f"{'s' if results['jobs'] > 1 else ''} at a time (with more than one, the wall times share the cores)."
    )
    harmed = sum(run_figures(u).harm for u in units)
    headers = ["set", "arch", "v1 → v2", "seed", "evidence", "no treatment: ER, flips / n", "shipped"]
    headers += ["shipped: ER, flips", "ER change", "NFR ratio", "harm", "demo's promise", "auto", "plain", "×"]
    return (
        f"{head} {when}\n\n{EXPECTED}\n\n"
        f"Harm in {harmed} of {len(units)} runs.\n\n"
        f"{pooled_table(pooled(units))}\n\n"
        f"{markdown_table(headers, run_rows(units))}\n\n"
        f"![the shipped candidate's ER change against its NFR ratio, per run]({plot_link})\n"
    )


def plot(results: dict[str, Any], path: Path) -> Path:
    """Per run, the shipped candidate's eval ER change (pt) against its NFR ratio, a colour per set and
    a marker per architecture, a harmful run outlined; the targets drawn: +0.5 pt, 0.8× and 0.6× (and 1×,
    no treatment's flips). An infinite ratio is drawn at the top edge."""
    from orchestrator.views import plots

    plt = plots.pyplot()
    units = ordered(list(results["units"].values()))
    figures = [run_figures(u) for u in units]
    finite = [f.ratio for f in figures if not math.isinf(f.ratio)]
    top = max([1.2, *finite]) * 1.1
    sets = list(dict.fromkeys(u["set"] for u in units))
    archs = list(dict.fromkeys(u["arch"] for u in units))
    figure, axes = plt.subplots(figsize=(7.5, 4.8))
    for u, f in zip(units, figures):
        axes.scatter(
            100 * f.er_change,
            top if math.isinf(f.ratio) else f.ratio,
            color=plt.cm.tab10(sets.index(u["set"]) % 10),
            marker=plots.MARKERS[archs.index(u["arch"]) % len(plots.MARKERS)],
            edgecolors="black" if f.harm else "none",
            s=45,
            alpha=0.85,
        )
    axes.axvline(100 * HARM_ER, color="tab:red", linestyle="--", linewidth=1, label="ER +0.5 pt")
    axes.axhline(0.8, color="tab:green", linestyle="--", linewidth=1, label="0.8× (text-bag, text-linear, demos)")
    axes.axhline(0.6, color="tab:blue", linestyle=":", linewidth=1, label="0.6× (MiniLM)")
    for i, name in enumerate(sets):
        axes.scatter([], [], color=plt.cm.tab10(i % 10), marker="o", label=name)
    for i, name in enumerate(archs):
        axes.scatter([], [], color="grey", marker=plots.MARKERS[i % len(plots.MARKERS)], label=name)
    axes.axhline(1.0, color="grey", linewidth=0.8)
    changes = [100 * f.er_change for f in figures]
    axes.set_xlim(min(-1.0, *changes) - 0.2, max(1.0, *changes) + 0.2)
    axes.set_ylim(0, top * 1.05)
    axes.set_xlabel("shipped eval ER − no treatment's (pt)")
    axes.set_ylabel("shipped NFR / no treatment's")
    axes.set_title("method auto per run: harm is right of the red line or above 1×", fontsize=10)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    figure.tight_layout()
    return plots.save(figure, path)
