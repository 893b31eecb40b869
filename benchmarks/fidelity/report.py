"""The fidelity section of docs/benchmarks/fidelity.md and its ER–NFR scatter plot, from the results record."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.fidelity.modes import set_name
from benchmarks.fidelity.trainings import VERSIONS
from benchmarks.quality.baselines_grid import short_name
from benchmarks.report import markdown_table, results_beside

SECTION = "## Fidelity, small scale (CPU): the papers' ER/NFR ordering on Fashion-MNIST"
GPU_SECTION = "## Fidelity at GPU scale: resnet20 on full Fashion-MNIST"


def plot_name(mode_name: str) -> str:
    """The file name of a mode's ER–NFR scatter in the results folder."""
    return "fidelity-scatter.png" if mode_name in ("default", "quick") else f"fidelity-{mode_name}-scatter.png"


def results_name(mode_name: str) -> str:
    """The file name of a mode's results record in the results folder (what --merge writes, or a copy)."""
    return f"fidelity-{mode_name}-results.json"


def kept_copy(record: Mapping[str, Any], page: Path) -> str:
    """The copy of `record`'s results file kept beside `page` (docs/results/), where there is one."""
    copy = results_beside(page) / results_name(record["mode"]["name"])
    return str(copy) if copy.exists() and str(copy) != record["results_path"] else ""


def heading(mode: Mapping[str, Any]) -> str:
    """The docs/benchmarks/fidelity.md section a mode's results go to: GPU scale next to the CPU's small scale,
    one section per text architecture pair, one per fine-tuning table."""
    if mode.get("fine_tuning"):
        return f"## Fidelity, fine-tuning from the deployed weights: {data_name(mode)}"
    if mode.get("dataset", "fashion-mnist") != "fashion-mnist":
        where = " (GPU)" if mode["device"] == "cuda" else ""
        if mode.get("adapter"):  # LoRA adapters: a section of their own beside the fully fine-tuned one
            return f"## Fidelity on text{where}: {data_name(mode)}, LoRA adapters against full fine-tuning"
        if mode.get("recipe"):  # a pretrained encoder: one section per text set
            return f"## Fidelity on text{where}: {data_name(mode)}, fine-tuned"
        return f"## Fidelity on text{where}: {mode['old_arch']} → {mode['arch']} on tweet sentiment"
    return GPU_SECTION if mode["device"] == "cuda" or mode["name"].startswith("gpu") else SECTION


def mode_flag(mode: Mapping[str, Any]) -> str:
    """How the command line names the mode: 'default', '`--text`', '`--mode fine-tuning`'."""
    if mode["name"] == "default":
        return "default"
    return f"`--{mode['name']}`" if mode["name"] in ("quick", "gpu", "text") else f"`--mode {mode['name']}`"


def data_name(mode: Mapping[str, Any]) -> str:
    """'tweets, text-bag → text-cnn', 'reuters-r8, hf:all-MiniLM-L6-v2' or 'Fashion-MNIST, small-cnn'."""
    dataset = mode.get("dataset", "fashion-mnist")
    arch = short_name(mode["arch"])
    if dataset != "fashion-mnist":
        old = mode["old_arch"]
        return f"{set_name(dataset)}, {old} → {arch}" if old and old != mode["arch"] else f"{set_name(dataset)}, {arch}"
    return f"Fashion-MNIST, {arch}"


def _elodi_setting(mode: Mapping[str, Any], old: str) -> str:
    """The sentence on which ELODI rows the table has."""
    legacy = f"Eq. 9's legacy LDI toward the plain old model (λ = {mode['legacy_weight']})"
    if not mode.get("both_ends", True):
        return f"""the old model is the plain one; the "plain old →" rows distil the new
model from its own m replicas, the second adding {legacy}"""
    return f"""the old model is itself an ELODI student of m {old} replicas (Algorithm 1); the
two "plain old →" rows distil only the new model, the second adding {legacy}"""


def _fine_tuning_setting(record: Mapping[str, Any], seeds: str) -> str:
    """The setting paragraph of a pretrained encoder's mode (one architecture, a fine-tuning recipe)."""
    mode, recipe = record["mode"], record["mode"]["recipe"]
    sizes = mode["train_sizes"]
    new_size = "all of it" if sizes[2] is None else f"the first {sizes[2]:,}"
    length = mode.get("max_length") or "auto"
    return "\n".join(
        [
            f"Setting ({mode_flag(mode)} mode): {set_name(mode['dataset'])}. Old: `{short_name(mode['arch'])}` "
            f"fine-tuned on the first {sizes[1]:,} samples of the training split; new: the same pretrained "
            f"weights fine-tuned on {new_size} (each from the directory's weights, with only the head new). "
            f"Every model: {recipe['optimizer']} lr {mode['lr']}, weight decay {mode['weight_decay']} on "
            f"{recipe['weight_decay_on']}, {mode['epochs']} epochs, batch {mode['batch_size']}, warm-up "
            f"{recipe['warmup_epochs']} epoch then {recipe['schedule']} decay, gradient norm clipped at "
            f"{recipe['max_grad_norm']}, {length} tokens, {mode['precision']} (the hf: recipe, pipelines/defaults.py); "
            f"eval: {record['n_eval']} held-out samples, val: {record['n_val']}. {seeds}; every method of a seed "
            "shares that seed's old model and replicas. Replica 1 of each version is its plain model; the paragon "
            f"is the mean logits of m = {mode['m']} replicas at both ends. ELODI (α = {mode['alpha']}, LDI with "
            f"p = 2 over all classes{_unlabelled_setting(mode)}): {_elodi_setting(mode, 'fine-tuned')}. "
            "BCWI: the old model fine-tuned "
            "again on the new data, then θ = α·θ_old + (1−α)·θ_new with α picked on val (lowest val NFR with val "
            "ER ≤ α = 0's + 0.3 pt). KD: α = 0.5, T = 4; FD: α = 0.9, focal 1 + 5·1[old correct], FD-KL T = 100."
            + _adapter_setting(mode),
        ]
    )


def _unlabelled_setting(mode: Mapping[str, Any]) -> str:
    """What an ELODI student reads beyond its labelled slice (`elodi_inputs` > 1, `data.unlabelled`); '' if nothing."""
    times = mode.get("elodi_inputs", 1)
    if times == 1:
        return ""
    return (
        f"; each ELODI student reads {times}× its version's slice: the slice, then the next {times - 1}× of the "
        "training split's texts with their labels dropped (`data.unlabelled`; the label term, weight 1 − α, "
        "counts the slice's rows only)"
    )


def _adapter_setting(mode: Mapping[str, Any]) -> str:
    """What an adapter mode changes: every model is a LoRA adapter; the full fine-tuning row; '' otherwise."""
    lora = mode.get("adapter")
    if not lora:
        return ""
    full = (
        f' The row "none, full fine-tuning" is the plain old and new models with every weight fine-tuned '
        f"(lr {mode['full_lr']}, the rest of the recipe the same, the seeds of the plain models)."
        if mode.get("full_lr")
        else ""
    )
    return (
        f" Every model but that row is a LoRA adapter (rank {lora['rank']}, alpha {lora['alpha']}, on "
        f"{', '.join(lora['targets'])}, dropout {lora['dropout']}) and the head on the frozen pretrained weights, at "
        "the adapter recipe's rate: ELODI's m replicas are m adapters on one base (as teachers they share its "
        f"weights in memory), and BCWI fine-tunes the old adapter and interpolates adapter and head.{full}"
    )


def _text_setting(record: Mapping[str, Any], seeds: str) -> str:
    """The setting paragraph of a text mode."""
    mode = record["mode"]
    if mode.get("recipe"):
        return _fine_tuning_setting(record, seeds)
    old_epochs, old_lr = mode["old_epochs"] or mode["epochs"], mode["old_lr"] or mode["lr"]
    new_size = "all of it" if mode["train_sizes"][2] is None else f"the first {mode['train_sizes'][2]}"
    old, arch, m = mode["old_arch"], mode["arch"], mode["m"]
    elodi_epochs = f"; ELODI students train {mode['elodi_epochs']} epochs" if mode.get("elodi_epochs") else ""
    sentences = [
        f"Setting ({mode_flag(mode)} mode): the built-in tweet-sentiment corpus (3 classes).",
        f"Old: `{old}` on the first {mode['train_sizes'][1]} samples of the training split (half),",
        f"{old_epochs} epoch(s), SGD lr {old_lr}; new: `{arch}` on {new_size}, {mode['epochs']} epoch(s),",
        f"SGD lr {mode['lr']}, weight decay {mode.get('weight_decay', 5e-4)}; each version reads the text through",
        "its own tokenizer (WordPiece, trained on",
        f"its own training split). Batch {mode['batch_size']}, cosine schedule, gradient norm clipped at 5,",
        f"no augmentation; eval: {record['n_eval']} held-out tweets, val: {record['n_val']}. {seeds}; every",
        "method of a seed shares that seed's old model and replicas. Replica 1 of each version is its plain",
        f"(no-treatment) model; the paragon is the mean logits of m = {m} replicas at both ends (the paper's",
        f"Table 1 protocol). ELODI (α = {mode['alpha']}, LDI with p = 2 over K = all 3 classes):",
        f"{_elodi_setting(mode, f'`{old}`')}{elodi_epochs}. BCWI: `{old}` fine-tuned from the old weights on all",
        "the data (the",
        "old tokenizer kept), then θ = α·θ_old + (1−α)·θ_new with α picked on val (lowest val NFR with val",
        "ER ≤ α = 0's + 0.3 pt). KD: α = 0.5, T = 4; FD: α = 0.9, focal 1 + 5·1[old correct], FD-KL",
        "T = 100; dynamic FD: logit matching.",
    ]
    return "\n".join(sentences)


def percent(value: tuple[float, float] | None) -> str:
    """'mean ± std' in percent, or 'undefined'."""
    return "undefined" if value is None else f"{100 * value[0]:.2f} ± {100 * value[1]:.2f}"


def plain_number(value: tuple[float, float] | None) -> str:
    return "undefined" if value is None else f"{value[0]:.3f} ± {value[1]:.3f}"


def invocation_lines(runs: Sequence[Mapping[str, Any]]) -> str:
    """'wall time 28.9 min (86 of 86 models trained)' for each invocation on the cache that trained a
    model, oldest first, and for the latest one."""
    runs = [run for run in runs[:-1] if run["trained"] > 0] + list(runs[-1:])
    return "; then ".join(
        f"wall time {run['wall_s'] / 60:.1f} min ({run['trained']} of {run['jobs']} models trained"
        f"{', the rest from the cache' if run['trained'] < run['jobs'] else ''})"
        for run in runs
    )


def table_markdown(table: Sequence[Mapping[str, Any]], gap: bool = True) -> str:
    """The main table; without `gap`, no "gap closed" column."""
    headers = ["method", "ER_old %", "ER_new %", "NFR %", "Rel-NFR", "PFR %", "gap closed %"]
    rows = [
        [
            e["method"],
            percent(e["er_old"]),
            percent(e["er_new"]),
            f"**{percent(e['nfr'])}**",
            plain_number(e["rel_nfr"]),
            percent(e["pfr"]),
            percent(e.get("gap_closed")),
        ]
        for e in table
    ]
    return markdown_table(headers, rows) if gap else markdown_table(headers[:-1], [row[:-1] for row in rows])


def verdict_lines(checks: Sequence[Mapping[str, Any]]) -> str:
    return "\n".join(
        f"- {c['row']}: {c['target']} — {c['value']:.2f} {c['unit']}: **{'met' if c['met'] else 'missed'}**"
        for c in checks
    )


def chain_markdown(chain: Mapping[str, Mapping[str, Any]]) -> str:
    def cell(c: Mapping[str, Any], i: int, j: int) -> str:
        return f"{100 * c['nfr_mean'][i][j]:.2f} ± {100 * c['nfr_std'][i][j]:.2f}"

    return markdown_table(
        ["chain", "ER v1 / v2 / v3 %", "NFR v1→v2 %", "NFR v2→v3 %", "NFR v1→v3 %"],
        [
            [name, " / ".join(f"{100 * e:.2f}" for e in c["er_mean"]), cell(c, 0, 1), cell(c, 1, 2), cell(c, 0, 2)]
            for name, c in chain.items()
        ],
    )


def curve_markdown(curve: Sequence[Mapping[str, Any]]) -> str:
    return markdown_table(
        ["m", "paragon ER_new %", "paragon NFR %", "ELODI ER_new %", "ELODI NFR %"],
        [
            [
                str(e["m"]),
                percent(e["paragon"]["er_new"]),
                percent(e["paragon"]["nfr"]),
                percent(e["elodi"]["er_new"]),
                percent(e["elodi"]["nfr"]),
            ]
            for e in curve
        ],
    )


def fine_tuning_markdown(split: Mapping[str, Any]) -> str:
    """The fine-tuning part of a section: each method from scratch against from the old weights, the
    from-old table in full and its targets."""
    pairs = markdown_table(
        [
            "method",
            "ER_new % scratch",
            "NFR % scratch",
            "ER_new % from old",
            "NFR % from old",
            "NFR from old ÷ scratch",
        ],
        [
            [
                scratch["method"],
                percent(scratch["er_new"]),
                percent(scratch["nfr"]),
                percent(tuned["er_new"]),
                f"**{percent(tuned['nfr'])}**",
                f"{tuned['nfr'][0] / scratch['nfr'][0]:.2f}" if scratch["nfr"][0] else "undefined",
            ]
            for scratch, tuned in zip(split["table"], split["from_old"])
        ],
    )
    return f"""From the old weights: the same methods with every new model (plain training, the replicas,
the students) started from the plain old model's weights, as `init: old` starts a version from the
deployed one, at the same learning rate and schedule; text models read the old model's tokenizer,
which `init: old` keeps. BCWI fine-tunes from the old weights in both tables, so its row is one model.
Each method, from scratch against from the old weights (eval split, mean ± std over seeds):

{pairs}

The from-old table in full. Its paragon's new side is m models fine-tuned from the one plain old
model: they barely differ, so it is no upper bound here, and there is no "gap closed" column:

{table_markdown(split["from_old"], gap=False)}

Targets on the from-old table:

{verdict_lines(split["from_old_verdicts"])}"""


def baseline_line(record: Mapping[str, Any]) -> str:
    """The text modes' reference: what the TF-IDF + logistic-regression baseline scores on the same
    splits (benchmarks/quality/baselines.py `baseline`), as a paragraph; '' where the run has none."""
    b = record.get("baseline")
    if not b:
        return ""
    return (
        f"The baseline a user would ship instead, on the same splits ({b['name']}, scikit-learn, fitted on "
        f"the old's {b['old_train_samples']:,} and the new's {b['train_samples']:,} training samples): ER_old "
        f"{100 * b['old_eval_error_rate']:.2f} %, ER_new {100 * b['eval_error_rate']:.2f} %, "
        f"NFR **{100 * b['eval_nfr']:.2f} %** (deterministic: one fit).\n\n"
    )


def section_body(record: Mapping[str, Any], plot_link: str, copy: str = "") -> str:
    """The markdown under SECTION (without the heading); `copy`: where a copy of the results file is kept."""
    mode, test = record["mode"], record["eval"]
    none = next(e for e in test["table"] if e["method"] == "none")
    seeds = len(none["per_seed"])  # the seeds whose models were trained (a deadline may stop a run)
    stopped = (
        f" (of {record['seeds']} planned: the run's deadline came first; the tables cover the models that finished)"
        if seeds < record["seeds"]
        else ""
    )
    sizes = ", ".join(f"{v} {n if n else 'all'}" for v, n in zip(VERSIONS, mode["train_sizes"]))
    chain = (
        ""
        if not test["chain"]
        else "Chain v1 → v2 → v3 (pairwise NFR, the ELODI paper's Table 5 shape), "
        + f"""\
plain models against ELODI
models (K = all, m = {mode["m"]}) on every version:

{chain_markdown(test["chain"])}

"""
    )
    growth = (
        "data growth on one architecture"
        if len(set(mode["train_sizes"])) == 3
        else "one architecture, old and new trained on the same images with different seeds (an update that retrains)"
    )
    machine = f"{record['machine']}, torch {record['torch']}"
    mode_name = mode_flag(mode)
    ldi = f"LDI {mode.get('ldi_reduction', 'sum')} over K{', true class left out' if mode.get('exclude_label') else ''}"
    batch, precision = mode.get("batch_size", 128), mode.get("precision", "fp32")
    elodi_epochs = f"; ELODI students {mode['elodi_epochs']} epochs" if mode.get("elodi_epochs") else ""
    setting = f"""Setting ({mode_name} mode): {growth} ({mode["arch"]}), so BCWI applies. Training
images per version: {sizes} (each slice contains the previous one); eval: the Fashion-MNIST test set
({record["n_eval"]} images); val: {record["n_val"]} held-out training images. {mode["epochs"]} epochs, batch
{batch}, {precision}, SGD lr {mode["lr"]} cosine, augmentation (pad-crop, flip), gradient
norm clipped at 5; {ldi}{elodi_epochs}. {seeds} seed(s){stopped}; every
method of a seed shares that seed's old model and replicas. Replica 1 of each version is its plain
(no-treatment) model; the paragon is the mean logits of m = {mode["m"]} replicas at both ends (the
paper's Table 1 protocol: the old side is an ensemble too). ELODI (α = {mode["alpha"]}, LDI with
p = 2): {_elodi_setting(mode, "old-architecture")}. BCWI: fine-tune from the old weights, then
θ = α·θ_old + (1−α)·θ_new with α picked on val (lowest val NFR with val ER ≤ α = 0's + 0.3 pt;
every parameter and BatchNorm buffer interpolated). KD: α = 0.5, T = 4; FD: α = 0.9, focal 1 + 5·1[old
correct], FD-KL T = 100; dynamic FD: logit matching."""
    if mode.get("dataset", "fashion-mnist") != "fashion-mnist":
        setting = _text_setting(record, f"{seeds} seed(s){stopped}")
    curve = (
        f"""NFR against the ensemble size m (both ends: paragon = m-model ensembles, ELODI = students of m
replicas; m = 1 distils one replica), over {min(seeds, record["curve_seeds"])} seed(s):

{curve_markdown(test["curve"])}

"""
        if test["curve"]
        else ""
    )
    reference = baseline_line(record)
    kept = f" (a copy: {copy})" if copy else ""
    return f"""Command: `{record["command"]}` on {record["cpus"]} CPU cores ({machine},
{record["device"]}), {record["date"]}: {invocation_lines(record["invocations"])}.

{setting}

Main table, old → new on the eval split (mean ± std over seeds):

{table_markdown(test["table"])}

{reference}No-treatment NFR is {100 * none["nfr"][0]:.2f} % with a seed-to-seed std\
 of {100 * none["nfr"][1]:.2f} points. \
"Gap closed" =
(NFR_none − NFR) / (NFR_none − NFR_paragon), per seed, then mean ± std (the paper: 93 % on ImageNet).

Targets (computed from the means above):

{verdict_lines(test["verdicts"])}

{fine_tuning_markdown(test) if "from_old" in test else ""}

{"![ER–NFR scatter](" + plot_link + ")" if plot_link else ""}

{chain}{curve}The same numbers on the val split (for any tuning) are in `{record["results_path"]}`{kept}.
"""
