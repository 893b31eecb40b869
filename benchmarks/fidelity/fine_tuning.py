"""Fine-tuning the deployed model (`init: old`) against training the update from scratch: error
rate and negative flips of plain training by learning rate, on 3 seeds (the figures behind the
documented fine-tuning defaults). Every method from either start is the fidelity benchmark's
fine-tuning table (`python -m benchmarks.fidelity --mode fine-tuning`, `--mode fine-tuning-text`).

    python -m benchmarks.fidelity.fine_tuning [--seeds 3] [--settings fashion-mnist tweets]

Data growth on one architecture, so the old weights fit the new model: the old version trains on
the first part of the training split, the new one on all of it (Fashion-MNIST: small-cnn on 5,000
then 10,000 images; tweets: text-bag on 13,640 then 27,280 texts, the text fidelity table's old).
From scratch the new model trains at the architecture's own learning rate; from the old weights
at that rate and at 1/5 and 1/25 of it (cosine schedule, same epochs). Every model goes through the
pipeline's own path (spec → preflight → `workers.tasks.bodies.train_job`), in this process, one thread.
NFR and ER are counted on the whole regression-eval split.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.report import RESULTS_DIR, markdown_table, page, write_section
from orchestrator.planning.preflight import preflight
from pipelines.spec import UpdateSpec, parse_spec
from workers.metrics import error_rate, negative_flip_rate
from workers.models.checkpoints import load_model
from workers.models.predict import predict_logits
from workers.tasks.bodies import train_job
from workers.tasks.resolve import cached_splits

SECTION = "## Fine-tuning from the deployed weights (`init: old`)"
RESULTS = RESULTS_DIR / "fine-tuning-results.json"
PLOT = RESULTS_DIR / "fine-tuning-scatter.png"


@dataclass(frozen=True)
class Setting:
    name: str
    arch: str
    data: dict[str, Any]
    old_limit: int
    new_limit: int | None
    epochs: int
    lr: float
    train: dict[str, Any]


SETTINGS = (
    Setting("fashion-mnist", "small-cnn", {}, 5000, 10000, 4, 0.05, {}),
    Setting(
        "tweets",
        "text-bag",
        {"dataset": "tweet-sentiment"},
        13640,
        None,
        5,
        2.0,
        {"weight_decay": 0.0},
    ),
)
ARCHS = {s.name: s.arch for s in SETTINGS}
LR_FRACTIONS = (1.0, 0.2, 0.04)  # fine-tuning learning rates, as fractions of the one from scratch


def spec_of(
    setting: Setting, version: str, seed: int, lr: float, limit: int | None, folder: Path, **extra: Any
) -> UpdateSpec:
    return parse_spec(
        {
            "model": f"bench-ft-{setting.name}",
            "version": version,
            "arch": setting.arch,
            "data": {**setting.data, "train_limit": limit},
            "method": {"name": "none"},
            # SGD, batch 128, as when the documented figures were taken (text-bag's defaults now differ)
            "train": {
                "epochs": setting.epochs,
                "optimizer": "sgd",
                "batch_size": 128,
                "lr": lr,
                "seed": seed,
                **setting.train,
            },
            "storage": str(folder),
            "resources": {"teacher_actors": 0},
            **extra,
        }
    )


def trained(spec: UpdateSpec, folder: Path) -> str:
    """The spec's model trained through the pipeline's own job; its checkpoint path."""
    plan = preflight(spec)
    job = plan.student_job()
    job = replace(job, checkpoint_uri=str(folder / f"{spec.version}-{spec.spec_hash}.pt"))
    return train_job(job).checkpoint


def scored(old_ids: np.ndarray, ids: np.ndarray, labels: np.ndarray, began: float, **row: Any) -> dict[str, Any]:
    """A results row: `row` (what was trained) with ER of old and new, NFR, seconds since `began`;
    printed as a progress line."""
    row |= {
        "er_old": float(error_rate(old_ids, labels)),
        "er": float(error_rate(ids, labels)),
        "nfr": float(negative_flip_rate(old_ids, ids, labels)),
        "seconds": time.perf_counter() - began,
    }
    what = " ".join(str(v) for k, v in row.items() if k in ("setting", "seed", "start", "method", "lr"))
    print(f"{what}: ER {row['er']:.4f} NFR {row['nfr']:.4f}")
    return row


def predictions(checkpoint: str, data: Any) -> np.ndarray:
    model, settings = load_model(checkpoint)
    return predict_logits(model, data, inputs=settings.inputs).argmax(1).numpy()


def run_seed(setting: Setting, seed: int, folder: Path) -> list[dict[str, Any]]:
    old = trained(spec_of(setting, "old", 100 + seed, setting.lr, setting.old_limit, folder), folder)
    new_spec = spec_of(setting, "scratch", seed, setting.lr, setting.new_limit, folder)
    evaluation = cached_splits(preflight(new_spec).data).eval
    labels = evaluation.labels.numpy()
    old_ids = predictions(old, evaluation)
    rows = []
    runs = [("scratch", setting.lr, new_spec)] + [
        (
            "from old",
            setting.lr * f,
            spec_of(setting, f"ft-{f:g}", seed, setting.lr * f, setting.new_limit, folder, init="old", old=old),
        )
        for f in LR_FRACTIONS
    ]
    for start, lr, spec in runs:
        began = time.perf_counter()
        ids = predictions(trained(spec, folder), evaluation)
        rows.append(scored(old_ids, ids, labels, began, setting=setting.name, seed=seed, start=start, lr=lr))
    return rows


def summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean ± std over seeds per (setting, start, lr)."""
    groups: dict[tuple[str, str, float], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["setting"], row["start"], row["lr"]), []).append(row)
    out = []
    for (setting, start, lr), group in groups.items():
        er, nfr = np.array([r["er"] for r in group]), np.array([r["nfr"] for r in group])
        out.append(
            {
                "setting": setting,
                "start": start,
                "lr": lr,
                "seeds": len(group),
                "er_old": float(np.mean([r["er_old"] for r in group])),
                "er": float(er.mean()),
                "er_std": float(er.std(ddof=1)) if len(group) > 1 else 0.0,
                "nfr": float(nfr.mean()),
                "nfr_std": float(nfr.std(ddof=1)) if len(group) > 1 else 0.0,
                "seconds": float(np.mean([r["seconds"] for r in group])),
            }
        )
    return out


def plot(table: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = list(dict.fromkeys(r["setting"] for r in table))
    figure, axes = plt.subplots(1, len(settings), figsize=(5 * len(settings), 4))
    for ax, name in zip(np.atleast_1d(axes), settings):
        for row in (r for r in table if r["setting"] == name):
            marker = "o" if row["start"] == "scratch" else "s"
            ax.errorbar(
                100 * row["er"],
                100 * row["nfr"],
                xerr=100 * row["er_std"],
                yerr=100 * row["nfr_std"],
                fmt=marker,
                capsize=3,
                label=f"{row['start']}, lr {row['lr']:g}",
            )
        ax.set_title(name)
        ax.set_xlabel("error rate of the new model (%)")
        ax.set_ylabel("NFR against the old model (%)")
        ax.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--settings", nargs="*", default=[s.name for s in SETTINGS])
    parser.add_argument("--out", default=page("fidelity"))
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for setting in (s for s in SETTINGS if s.name in args.settings):
            for seed in range(args.seeds):
                rows += run_seed(setting, seed, Path(tmp))
    table = summary(rows)
    RESULTS.write_text(json.dumps({"rows": rows, "summary": table}, indent=1) + "\n")
    plot(table, PLOT)
    table_text = markdown_table(
        ["data, arch", "start", "lr", "ER %", "NFR % vs old", "seconds"],
        [
            [
                f"{r['setting']}, {ARCHS[r['setting']]} (old ER {100 * r['er_old']:.2f} %)",
                r["start"],
                f"{r['lr']:g}",
                f"{100 * r['er']:.2f} ± {100 * r['er_std']:.2f}",
                f"{100 * r['nfr']:.2f} ± {100 * r['nfr_std']:.2f}",
                f"{r['seconds']:.0f}",
            ]
            for r in table
        ],
    )
    body = (
        f"`python -m benchmarks.fidelity.fine_tuning` ({args.seeds} seeds, mean ± std; {len(rows)} models, one CPU "
        "thread each). "
        "No treatment, the new model trained from scratch or from the old model's weights (`init: old`) at "
        "several learning rates; NFR against the old model on the whole regression-eval split. Data: "
        "docs/results/fine-tuning-results.json; plot: docs/results/fine-tuning-scatter.png.\n\n" + table_text
    )
    write_section(Path(args.out), SECTION, body)
    print(body)


if __name__ == "__main__":
    main()
