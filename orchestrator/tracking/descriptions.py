"""The registry's own words: the Markdown descriptions MLflow shows for a registered model (what it
is, the chain so far, the champion marked) and for each version (one sentence: its method, its
parent, its flips against that parent beside no treatment's, its error rate, where its NFR matrix
and report are). `model_description` and `version_description` are pure; `describe` writes them."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from orchestrator.tracking.version_record import VersionRecord
from workers.percent import percent

METHOD_NAMES = {
    "none": "no treatment",
    "kd": "KD",
    "fd-kl": "FD-KL",
    "fd-lm": "FD-LM",
    "dynamic-fd": "dynamic FD",
    "ensemble": "ensemble",
    "elodi": "ELODI",
    "bcwi": "BCWI",
    "proximal": "proximal",
    "auto": "auto",
    "elodi-legacy": "ELODI with the legacy term",
}


def _pct(fraction: float | None) -> str:
    return percent(fraction)


def _label(row: VersionRecord) -> str:
    return row.label or f"version {row.version}"


def method_text(method: str, params: Mapping[str, str]) -> str:
    """`ELODI (m 4)`, `BCWI (α 0.6)`, `proximal (λ 0.001)`, `KD`: the method and what sets it apart,
    from the run's params (`method.m`, `method.proximal_weight`) and tags (`bcwi.alpha`)."""
    name = METHOD_NAMES.get(method, method)
    if method in ("elodi", "ensemble") and params.get("method.m"):
        return f"{name} (m {params['method.m']})"
    if method == "bcwi" and params.get("bcwi.alpha"):
        return f"{name} (α {params['bcwi.alpha']})"
    if method == "proximal" and params.get("method.proximal_weight"):
        return f"{name} (λ {params['method.proximal_weight']})"
    return name


def no_treatment(rows: Sequence[VersionRecord], row: VersionRecord) -> list[float]:
    """The NFRs against the same parent, on the same eval split, of the chain's other versions
    trained without treatment: what the version's NFR compares with."""
    if row.parent_version is None or row.method == "none":
        return []
    return [
        other.nfr
        for other in rows
        if other.version != row.version
        and other.method == "none"
        and other.parent_version == row.parent_version
        and other.fingerprint == row.fingerprint
        and other.nfr is not None
    ]


def _spread(nfrs: Sequence[float]) -> str:
    if len(nfrs) == 1:
        return _pct(nfrs[0])
    return f"{percent(statistics.mean(nfrs))} ± {percent(statistics.stdev(nfrs))} (over {len(nfrs)})"


def version_sentence(row: VersionRecord, rows: Sequence[VersionRecord], method: str) -> str:
    """`v2-elodi: ELODI (m 4) from v1; NFR 1.49% against v1, no treatment 1.97%; ER 10.42%`
    (`… against v1 on 10,000 eval samples, …` where the record says how many the flips count)."""
    parents = [other for other in rows if other.version == row.parent_version]
    parent = _label(parents[0]) if parents else None
    if parent is None and row.nfr is None:
        return f"{_label(row)}: {method}, the first version of the chain; ER {_pct(row.error_rate)}"
    against = parent or "its old model"
    flips = f"NFR {_pct(row.nfr)} against {against}"
    if row.n_compared:  # the old model re-run on this version's eval split: how many samples the flips count
        flips += f" on {row.n_compared:,} eval samples"
    plain = no_treatment(rows, row)
    trained_beside = next((c.get("nfr") for c in row.candidates if c.get("name") == "none"), None)
    if trained_beside is not None:  # method auto: its own no-treatment candidate, same data and seed
        plain = [trained_beside, *plain]
    if plain:
        flips += f", no treatment {_spread(plain)}"
    if row.chosen:
        method = f"{method} (chose {METHOD_NAMES.get(row.chosen, row.chosen)} on the validation split)"
    return f"{_label(row)}: {method} from {against}; {flips}; ER {_pct(row.error_rate)}"


def version_description(
    model: str, row: VersionRecord, rows: Sequence[VersionRecord], method: str, run_link: str
) -> str:
    """The version's description: its sentence, then where its NFR matrix and report are."""
    return (
        f"{version_sentence(row, rows, method)}.\n\n"
        f"NFR matrix of the chain at this registration: `nfr_matrix.png` and `nfr_matrix.json` in "
        f"{run_link}; flip report: `congruent report {model} --version {row.version}` writes it and "
        f"logs it to that run as `report/report.html`."
    )


def _what(rows: Sequence[VersionRecord], classes: int | None) -> str:
    kind = f"a {classes}-class classifier" if classes else "a classifier"
    return f"{kind} (latest architecture: {rows[-1].arch or '?'})"


def model_description(model: str, rows: Sequence[VersionRecord], classes: int | None = None) -> str:
    """The registered model's description: what it is (`classes` of its latest version), the chain
    so far as a table (version, label, method, architecture, parent, ER, NFR and PFR against the
    parent), the champion marked."""
    champion = next((row for row in rows if "champion" in row.aliases), None)
    lines = [
        f"**{model}** is {_what(rows, classes)} updated with Congruent: each version is measured by the flips "
        "it causes against its parent. NFR (negative flips) counts the evaluation samples the parent got "
        "right and the version gets wrong; PFR (positive flips) the reverse; ER is the error rate.",
        "",
        f"The chain so far: {len(rows)} version{'s' if len(rows) != 1 else ''}; champion: "
        + (f"version {champion.version} ({_label(champion)})." if champion else "none yet."),
        "",
        "| version | label | method | arch | parent | ER | NFR vs parent | PFR vs parent |",
        "|---|---|---|---|---|---|---|---|",
    ]
    labels = {row.version: _label(row) for row in rows}
    for row in rows:
        aliases = ", ".join(row.aliases)
        version = f"**{row.version} ★ {aliases}**" if "champion" in row.aliases else row.version
        if aliases and "champion" not in row.aliases:
            version += f" ({aliases})"
        parent = row.parent_version
        lines.append(
            f"| {version} | {row.label} | {METHOD_NAMES.get(row.method, row.method)} | "
            f"{row.arch} | {labels.get(parent, parent) if parent else '—'} | {_pct(row.error_rate)} | "
            f"{_pct(row.nfr)} | {_pct(row.pfr)} |"
        )
    lines += ["", "Written by Congruent at each registration and promotion; `congruent versions " + model + "`."]
    return "\n".join(lines)


def describe(model: str, rows: Sequence[VersionRecord], version: str | None = None) -> None:
    """Write the registered model's description from its chain `rows` (`registry.chain`; the class
    count of its latest version), and `version`'s when given (at its registration)."""
    from mlflow import MlflowClient

    if not rows:
        return
    client = MlflowClient()
    classes = len(rows[-1].class_names) or None
    client.update_registered_model(model, description=model_description(model, rows, classes))
    if version is None:
        return
    row = next(row for row in rows if row.version == str(version))
    mv = client.get_model_version(model, str(version))
    run = client.get_run(mv.run_id) if mv.run_id else None
    # the run's params and tags (`method.m`, `bcwi.alpha`): what sets the method apart, not version tags
    params = {**run.data.params, **run.data.tags} if run else {}
    link = f"[its run](#/experiments/{run.info.experiment_id}/runs/{run.info.run_id})" if run else "its run"
    text = version_description(model, row, rows, method_text(row.method, params), link)
    client.update_model_version(model, str(version), description=text)
