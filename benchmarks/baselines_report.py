"""docs/benchmarks.md's baselines section from docs/baselines-results.json (benchmarks/baselines.py)."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from benchmarks.baselines_grid import (
    BUDGETS,
    CANDIDATES,
    FULL,
    IMAGE_ARCHS,
    OLD_TEXT_LIMIT,
    SECTION,
    TEXT_ARCHS,
    Unit,
    data_of,
    key_of,
)
from benchmarks.report import markdown_table, write_section
from pipelines.defaults import recipe_for
from pipelines.reference import is_recipe

DOC = Path("docs/benchmarks.md")


def percent(value: float) -> str:
    return f"{100 * value:.2f}"


def recipe_text(config: dict[str, Any], text: bool = False) -> str:
    """`sgd lr 0.1, wd 5e-4, 10 epochs, batch 128` from a unit's resolved settings (augmentation:
    images only)."""
    warmup = f", warm-up {config['warmup_epochs']:g}" if config.get("warmup_epochs") else ""
    flat = ", no augmentation" if config.get("augment") is False and not text else ""
    return (
        f"{config['optimizer']} lr {config['lr']:g}, wd {config['weight_decay']:g}, "
        f"{config['epochs']} epochs, batch {config['batch_size']}{warmup}{flat}"
    )


def baseline_for(results: dict[str, Any], arch: str) -> dict[str, Any] | None:
    kind = "text" if arch in TEXT_ARCHS else "image"
    data = data_of(arch)
    for b in results["baselines"]:
        if (b["kind"], b["train_limit"], b["eval_limit"]) == (kind, data["train_limit"], data["eval_limit"]):
            return b
    return None


def table_rows(results: dict[str, Any]) -> list[list[str]]:
    rows = []
    for arch in (*TEXT_ARCHS, *IMAGE_ARCHS):
        # the defaults as they are now: a unit trained with an earlier recipe is not theirs
        current = {key_of(Unit("table", arch, seed)) for seed in range(BUDGETS.get(arch, FULL).seeds)}
        units = [u for u in results["units"] if u["part"] == "table" and u["key"] in current]
        base = baseline_for(results, arch)
        if not units or base is None:
            continue
        ers = [u["eval_error_rate"] for u in units]
        mean = statistics.mean(ers)
        spread = f" ± {percent(statistics.stdev(ers))}" if len(ers) > 1 else ""
        text = arch in TEXT_ARCHS
        met = mean <= base["eval_error_rate"] if text else mean < base["eval_error_rate"]
        rows.append(
            [
                f"`{arch}`",
                f"{units[0]['train_samples']:,} / {units[0]['eval_samples']:,}",
                recipe_text(units[0]["config"], arch in TEXT_ARCHS),
                f"{percent(mean)}{spread} ({len(ers)} seed{'s' if len(ers) > 1 else ''})",
                percent(base["eval_error_rate"]),
                f"{100 * (mean - base['eval_error_rate']):+.2f}",
                "yes" if met else "**no**",
                f"{statistics.mean(u['seconds'] for u in units):.0f}",
            ]
        )
    return rows


def mean_spread(values: list[float]) -> str:
    """'23.61 ± 0.12 (3 seeds)' in percent; one value: '23.61 (1 seed)'."""
    spread = f" ± {percent(statistics.stdev(values))}" if len(values) > 1 else ""
    return f"{percent(statistics.mean(values))}{spread} ({len(values)} seed{'s' if len(values) > 1 else ''})"


def current_units(results: dict[str, Any], arch: str, old: bool = False) -> dict[int, dict[str, Any]]:
    """The table units of `arch` trained with its current defaults, by seed (a unit trained with an
    earlier recipe is not theirs); `old`: its old models (half the training split)."""
    budget = BUDGETS.get(arch, FULL)
    seeds = budget.old_seeds if old else budget.seeds
    keys = {key_of(Unit("table", arch, seed, old=old)): seed for seed in range(seeds)}
    return {keys[u["key"]]: u for u in results["units"] if u["part"] == "table" and u["key"] in keys}


def flip_rows(results: dict[str, Any]) -> list[list[str]]:
    """Text: per architecture, old (first half of the training split) → new (all of it), the models
    of one seed; NFR counted over the eval split, and how many eval predictions two seeds' new
    models disagree on (seeds 0 and 1)."""
    from workers.metrics import error_rate, negative_flip_rate

    base = next((b for b in results["baselines"] if b["kind"] == "text" and "eval_labels" in b), None)
    if base is None:
        return []
    labels = [int(c) for c in base["eval_labels"]]

    def classes(unit: dict[str, Any]) -> list[int]:
        return [int(c) for c in unit["eval_predictions"]]

    rows = [
        [
            f"baseline: {base['name']}",
            percent(base["old_eval_error_rate"]),
            percent(base["eval_error_rate"]),
            f"**{percent(base['eval_nfr'])}**",
            "",
            "0 (one fit)",
        ]
    ]
    for arch in TEXT_ARCHS:
        new, old = current_units(results, arch), current_units(results, arch, old=True)
        pairs = [(old[s], new[s]) for s in sorted(old) if s in new and "eval_predictions" in new[s]]
        if not pairs:
            continue
        nfrs = [negative_flip_rate(classes(o), classes(n), labels) for o, n in pairs]
        differ = ""
        if all(s in new and "eval_predictions" in new[s] for s in (0, 1)):
            count = sum(a != b for a, b in zip(classes(new[0]), classes(new[1])))
            differ = f"{count:,} ({100 * count / len(labels):.2f} %)"
        rows.append(
            [
                f"`{arch}`",
                mean_spread([error_rate(classes(o), labels) for o, _ in pairs]),
                mean_spread([error_rate(classes(n), labels) for _, n in pairs]),
                f"**{mean_spread(nfrs)}**",
                f"{100 * (statistics.mean(nfrs) - base['eval_nfr']):+.2f}",
                differ,
            ]
        )
    return rows


def sweep_rows(results: dict[str, Any]) -> list[list[str]]:
    rows = []
    for arch in (*TEXT_ARCHS, *IMAGE_ARCHS):
        recipe = recipe_for(arch)
        for unit in [u for u in results["units"] if u["part"] == "sweep" and u["arch"] == arch]:
            c = unit["config"]
            chosen = is_recipe(recipe, c, arch in TEXT_ARCHS)
            rows.append(
                [
                    f"`{arch}`",
                    recipe_text(c, arch in TEXT_ARCHS) + (" **(default)**" if chosen else ""),
                    percent(unit["val_error_rate"]),
                    percent(unit["eval_error_rate"]),
                    f"{unit['final_loss']:.3f}",
                    f"{unit['seconds']:.0f}",
                ]
            )
    return rows


def body(results: dict[str, Any]) -> str:
    baselines = {b["kind"]: b["name"] for b in results["baselines"]}
    budgets = [f"- `{arch}`: {b.why}" for arch, b in BUDGETS.items()]
    return "\n".join(
        [
            "Commands: `python -m benchmarks.baselines --part sweep`, then `--part table`, then `--part report`; "
            f"{results.get('date', '')}, 2 CPU cores ({results.get('machine', '')}), one thread per training, one to "
            "three trainings at a time, often beside other work (the s column is wall time under that load, not "
            "a speed figure). Each row trains the architecture with its defaults (a spec with `arch` and "
            "`data` only: pipelines/defaults.py fills in `train`) and scores it on the regression-eval split; the "
            f"baseline is fitted on the same training samples and scored on the same eval samples "
            f"(text: {baselines.get('text', 'TF-IDF + logistic regression')}; images: "
            f"{baselines.get('image', 'logistic regression on pixels')}). Target: text at or below the baseline's "
            "ER, images below it.",
            "",
            markdown_table(
                ["arch", "train / eval samples", "defaults", "ER %", "baseline ER %", "Δ pt", "target met", "s"],
                table_rows(results),
            ),
            "",
            "Flips (text): each text architecture trained with its defaults as an update's old model on the "
            f"first {OLD_TEXT_LIMIT:,} tweets of the training split (half), and as the new model on all of them; NFR "
            "old → new between the models of one seed, counted over the eval split; the baseline fitted the same "
            "two ways. The last column: eval predictions on which the new models of seeds 0 and 1 disagree (a "
            "convex model trained to its optimum barely depends on its seed).",
            "",
            markdown_table(
                ["model", "ER old %", "ER new %", "NFR old → new %", "Δ NFR pt vs baseline", "seed 0 vs 1 differ"],
                flip_rows(results),
            ),
            "",
            "Training-set limits (2 CPUs): the rows above train on the first N samples of the training split "
            "where all of it would take too long:",
            "",
            *budgets,
            "",
            "How the defaults were chosen (`--part sweep`): each candidate trained once (seed 0) at the "
            "architecture's epochs, ER on the validation split; the default is the candidate with the lowest "
            "validation ER. Candidates per architecture: "
            + "; ".join(f"`{a}` {len(c)}" for a, c in CANDIDATES.items())
            + ". resnet32 takes resnet20's recipe, resnet34 and resnet50 take resnet18's (one family each; "
            "a resnet34 training takes over 20 min here on 1,000 images: the s column).",
            "",
            markdown_table(["arch", "candidate", "val ER %", "eval ER %", "final loss", "s"], sweep_rows(results)),
        ]
    )


def write_report(results: dict[str, Any]) -> None:
    write_section(DOC, SECTION, body(results))
    print(f"wrote {DOC}: {SECTION}")


__all__ = ["FULL", "write_report"]
