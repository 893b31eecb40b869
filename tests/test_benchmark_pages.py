"""The benchmark pages (docs/benchmarks/) against their generators: every section a benchmark writes
from a results file kept in docs/results/ is what its report function writes from that file today,
so `--report` rewrites it unchanged; and every relative link of the pages names a file that exists."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _saved(path: Path) -> dict:
    return json.loads((ROOT / path).read_text())


def _streaming() -> list[tuple[str, str, Callable[[], str]]]:
    from benchmarks.streaming import (
        fidelity,
        first_epoch,
        memory_cap,
        sorted_shards,
        teachers_report,
        throughput,
        token_cache_cap,
    )

    modules = (throughput, fidelity, sorted_shards, first_epoch, token_cache_cap, memory_cap, teachers_report)
    return [("streaming", m.HEADING, lambda m=m: m.report(_saved(m.RESULTS))) for m in modules]


def _quality() -> list[tuple[str, str, Callable[[], str]]]:
    from benchmarks.quality import (
        adapter_cost,
        baselines,
        baselines_report,
        distill_inputs,
        harm_report,
        heldout_report,
        linear_optimum,
        protected_weight,
    )

    sections: list[tuple[str, str, Callable[[], str]]] = [
        (
            "quality",
            adapter_cost.HEADING,
            lambda: adapter_cost.report(_saved(adapter_cost.RESULTS), _saved(adapter_cost.FLIPS)),
        ),
        ("quality", baselines_report.SECTION, lambda: baselines_report.body(_saved(baselines.RESULTS))),
    ]
    sections += [
        ("quality", s.section, lambda name=name, s=s: heldout_report.report(_saved(s.results), name))
        for name, s in heldout_report.SETS.items()
        if (ROOT / s.results).exists()  # spam: run by the harm benchmark only, so far
    ]
    sections.append(("quality", harm_report.HEADING, lambda: harm_report.report(_saved(harm_report.RESULTS))))
    modules = (protected_weight, linear_optimum, distill_inputs)
    return sections + [("quality", m.SECTION, lambda m=m: m.report(_saved(m.RESULTS))) for m in modules]


def _serving() -> list[tuple[str, str, Callable[[], str]]]:
    from benchmarks.serving import predict_scale as p

    return [("serving", p.HEADING, lambda: p.section(_saved(p.RESULTS)).removeprefix(p.HEADING).strip())]


def _fidelity() -> list[tuple[str, str, Callable[[], str]]]:
    """The fidelity sections whose results record is kept in docs/results/ (the others' is in the
    benchmark's cache, benchmark-output/fidelity/MODE/results.json, which is not committed)."""
    from benchmarks.fidelity.report import heading, kept_copy, plot_name, results_name, section_body
    from benchmarks.report import RESULTS_DIR, link, page

    def body(record: dict) -> str:
        plot = RESULTS_DIR / plot_name(record["mode"]["name"])
        return section_body(record, link(plot, page("fidelity")), kept_copy(record, page("fidelity")))

    records = [
        _saved(RESULTS_DIR / results_name(m)) for m in ("gpu", "text", "text-linear", "fine-tuning", "fine-tuning-text")
    ]
    return [("fidelity", heading(r["mode"]), lambda r=r: body(r)) for r in records]


def _performance() -> list[tuple[str, str, Callable[[], str]]]:
    from benchmarks.performance import adapter_teachers as a
    from benchmarks.performance import foreign_old as f

    return [
        ("performance", a.HEADING, lambda: a.report(_saved(a.RESULTS))),
        ("performance", f.HEADING, lambda: f.report(_saved(f.RESULTS))),
    ]


SECTIONS = [*_fidelity(), *_streaming(), *_quality(), *_serving(), *_performance()]


@pytest.mark.parametrize(("area", "heading", "body"), SECTIONS, ids=[heading[3:50] for _, heading, _ in SECTIONS])
def test_each_saved_results_section_is_what_its_report_writes(area, heading, body, monkeypatch):
    from benchmarks.report import page, with_section

    monkeypatch.chdir(ROOT)  # the benchmarks name their results folder from the repository root
    text = (ROOT / page(area)).read_text()
    assert heading in text, f"{heading!r} is not on {page(area)}"
    assert with_section(text, heading, body()) == text, f"rerun its --report: {heading!r} differs on {page(area)}"


def test_every_relative_link_of_the_benchmark_pages_names_a_file():
    pages = sorted((ROOT / "docs" / "benchmarks").glob("*.md"))
    assert {p.stem for p in pages} == {"index", "fidelity", "quality", "streaming", "serving", "performance"}
    broken = [
        f"{p.name}: {target}"
        for p in pages
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", p.read_text())
        if "://" not in target and not (p.parent / target).resolve().is_file()
    ]
    assert broken == []
