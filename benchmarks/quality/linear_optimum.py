"""Is `text-linear` trained to its optimum, and does training it further flip less?

    python -m benchmarks.quality.linear_optimum [--sets tweets reuters-r8 20newsgroups election-tweets]
                                                [--report docs/benchmarks/quality.md]

An update of a convex model should flip about as often as the data change makes it: two trainings
on the same data should agree. For each text set (a slice of it where the full set is slow or few
samples flip: `SLICES`), v1 on the first half of the training split (by `train_limit`'s fixed hash)
and v2 on all of it, three ways, NFR v1 → v2 and ER on the regression-eval split:

- `text-linear` with its defaults (SGD, pipelines/defaults.py), seeds 0 and 1, and how many eval
  predictions the two seeds' v2 models disagree on;
- the same model (features, idf, zero start) solved to its optimum: full-batch L-BFGS (strong-Wolfe
  line search, until the gradient or the loss stops moving) on mean cross-entropy + ‖W‖² / (2·C·n),
  scikit-learn's objective for C (the bias not penalised), at C 4 (the baseline's), 16 and 64;
- TF-IDF word 1–2-grams + logistic regression (C 4), the baseline (benchmarks/quality/baselines.py).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from benchmarks.report import RESULTS_DIR, markdown_table, show_section

SECTION = "## text-linear against its own optimum and TF-IDF + LR: NFR half → all"
RESULTS = RESULTS_DIR / "linear-optimum-results.json"
# each set's training samples (None: all): the long-text sets at a user's small-data size, where a
# few SGD epochs are the fewest steps; the tweets at 2,000 (at 27,661 the baselines table has them)
SLICES: dict[str, int | None] = {"tweets": 2000, "reuters-r8": 1000, "20newsgroups": 2000, "election-tweets": None}
SEEDS = (0, 1)
CS = (4.0, 16.0, 64.0)


def source(name: str) -> dict[str, Any]:
    from benchmarks.quality.baselines_grid import TEXT_SETS
    from workers.data.text_tables import ELECTION_TWEETS_CSV

    if name == "election-tweets":
        return {"path": str(ELECTION_TWEETS_CSV), "id_column": "id"}
    return TEXT_SETS[name]


def spec_of(name: str, limit: int | None, seed: int) -> Any:
    from pipelines.spec import parse_spec

    data = {**source(name), "train_limit": limit}
    return parse_spec({"model": "l", "version": "l", "arch": "text-linear", "data": data, "train": {"seed": seed}})


def solve_lbfgs(model: Any, ids: Any, labels: Any, c: float) -> int:
    """Minimise mean CE + ‖W‖² / (2·C·n) over `model`'s weights and bias by full-batch L-BFGS; returns
    how many times the loss was evaluated."""
    import torch

    from workers.models.text import ngram_features

    features, x = ngram_features(ids, model.vocab_size, model.buckets, model.idf)
    weights = model.weights.weight
    penalty = 1.0 / (c * len(labels))
    optimizer = torch.optim.LBFGS(
        model.parameters(),
        max_iter=1000,
        history_size=20,
        line_search_fn="strong_wolfe",
        tolerance_grad=1e-7,
        tolerance_change=1e-10,
    )
    calls = 0

    def closure() -> Any:
        nonlocal calls
        calls += 1
        optimizer.zero_grad()
        logits = (weights[features] * x.unsqueeze(-1)).sum(1) + model.bias
        loss = torch.nn.functional.cross_entropy(logits, labels) + penalty / 2 * (weights * weights).sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    return calls


def fit(name: str, limit: int | None, seed: int, c: float | None) -> tuple[Any, Any, float]:
    """One `text-linear` on the set's first `limit` training samples: SGD with its defaults (c None)
    or solved at C = c. Returns its eval predictions, the splits and the seconds it trained."""
    from orchestrator.planning.model_inputs import text_inputs
    from orchestrator.planning.plan import data_request, train_config
    from pipelines.spec import WorkerResources
    from workers.data.tokenizer import encode_texts
    from workers.models.checkpoints import ModelSettings
    from workers.models.predict import predict_logits
    from workers.tasks.resolve import cached_splits
    from workers.training.trainer import train

    spec = spec_of(name, limit, seed)
    splits = cached_splits(data_request(spec))
    inputs = text_inputs(spec, splits.train)
    settings = ModelSettings("text-linear", splits.num_classes, inputs, None)
    model = settings.build(seed)
    started = time.perf_counter()
    if c is None:
        train(model, splits.train, train_config(spec, seed, WorkerResources()), settings=settings)
    else:
        texts = splits.train.texts  # type: ignore[attr-defined]  # a held text split (`TextSet`)
        solve_lbfgs(model, encode_texts(inputs, texts)[0], splits.train.labels, c)
    seconds = time.perf_counter() - started
    return predict_logits(model, splits.eval, inputs=inputs).argmax(1), splits, seconds


def measure(name: str) -> dict[str, Any]:
    import torch

    from benchmarks.quality.baselines import tfidf_predictor
    from workers.metrics import error_rate, negative_flip_rate

    limit = SLICES[name]
    rows: list[dict[str, Any]] = []
    new_of_seed = {}
    for how in [*(("sgd", s) for s in SEEDS), *(("lbfgs", c) for c in CS)]:
        c = how[1] if how[0] == "lbfgs" else None
        seed = int(how[1]) if how[0] == "sgd" else 0
        new, splits, new_s = fit(name, limit, seed, c)
        old, old_splits, old_s = fit(name, len(splits.train) // 2, seed, c)
        labels = splits.eval.labels
        if how[0] == "sgd":
            new_of_seed[seed] = new
        rows.append(
            {
                "how": how[0],
                "seed" if how[0] == "sgd" else "c": how[1],
                "old_error_rate": error_rate(old, labels),
                "error_rate": error_rate(new, labels),
                "nfr": negative_flip_rate(old, new, labels),
                "seconds": round(old_s + new_s, 1),
            }
        )
        print(name, rows[-1], flush=True)
    old_base = tfidf_predictor(old_splits.train.texts, old_splits.train.labels)(splits.eval)
    new_base = tfidf_predictor(splits.train.texts, splits.train.labels)(splits.eval)
    old_base, new_base = torch.as_tensor(old_base), torch.as_tensor(new_base)
    seeds = list(new_of_seed.values())
    return {
        "set": name,
        "train_samples": len(splits.train),
        "old_train_samples": len(old_splits.train),
        "eval_samples": len(labels),
        "seeds_disagree": float((seeds[0] != seeds[1]).float().mean()),
        "rows": rows,
        "baseline": {
            "old_error_rate": error_rate(old_base, labels),
            "error_rate": error_rate(new_base, labels),
            "nfr": negative_flip_rate(old_base, new_base, labels),
        },
    }


def percent(value: float) -> str:
    return f"{100 * value:.2f} %"


def report(results: dict[str, Any]) -> str:
    rows = []
    for result in results["sets"].values():
        size = f"{result['old_train_samples']:,} → {result['train_samples']:,} / {result['eval_samples']:,}"
        base = result["baseline"]
        for row in result["rows"]:
            how = (
                f"`text-linear` defaults (SGD), seed {row['seed']}"
                if row["how"] == "sgd"
                else f"`text-linear` at its optimum, C {row['c']:g} (L-BFGS)"
            )
            rows.append(
                [
                    result["set"],
                    size,
                    how,
                    percent(row["old_error_rate"]),
                    percent(row["error_rate"]),
                    f"**{percent(row['nfr'])}**",
                    f"{100 * (row['nfr'] - base['nfr']):+.2f} pt",
                    f"{row['seconds']:.0f}",
                ]
            )
        rows.append(
            [
                result["set"],
                size,
                "TF-IDF + LR (C 4), the baseline",
                percent(base["old_error_rate"]),
                percent(base["error_rate"]),
                f"**{percent(base['nfr'])}**",
                "",
                "",
            ]
        )
    table = markdown_table(
        ["set", "v1 → v2 / eval samples", "model", "ER v1", "ER v2", "NFR v1 → v2", "NFR − baseline's", "s"], rows
    )
    agree = "; ".join(f"{r['set']} {percent(r['seeds_disagree'])}" for r in results["sets"].values())
    return (
        f"Command: `python -m benchmarks.quality.linear_optimum`, {results['date']}, 2 CPU cores, one thread. "
        f"v1 on the first half of each slice's training split, v2 on all of it; eval split. The two SGD seeds' v2 "
        f"models disagree on {agree} of the eval predictions.\n\n{table}\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", nargs="+", default=list(SLICES), choices=list(SLICES))
    parser.add_argument("--report", default=None, help="write the section into this markdown file")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"sets": {}}
    results["date"] = time.strftime("%Y-%m-%d")
    for name in args.sets:
        results["sets"][name] = measure(name)
        RESULTS.write_text(json.dumps(results, indent=2))
    show_section(report(results), args.report, SECTION)


if __name__ == "__main__":
    main()
