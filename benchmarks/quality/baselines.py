"""Each built-in architecture with its defaults against the baseline a user would pick instead:
TF-IDF over word 1–2-grams + logistic regression for text (the tweets, Reuters R8 and 20 Newsgroups),
logistic regression on the pixels for images (Fashion-MNIST), scikit-learn, on the very splits
Congruent trains and evaluates on. Text includes the pretrained encoder `make` installs (hf: MiniLM).

    python -m benchmarks.quality.baselines --part sweep [--jobs 2]   # choose: each candidate once, ER on val
    python -m benchmarks.quality.baselines --part table [--jobs 2]   # check: the defaults, 3 seeds, ER on eval
    python -m benchmarks.quality.baselines --part report             # docs/benchmarks/quality.md from the JSON

`--archs` and `--sets` narrow a run to some architectures and text sets.

Every model goes through the spec: a spec with `arch` and `data` (and, in the sweep, a candidate's
`train` fields) resolves to the `TrainConfig` the pipeline would run (`orchestrator.planning.plan.
train_config`, the architecture's recipe from pipelines/defaults.py filling in what the spec leaves
out), trained in one process with one thread (`workers.training.trainer.train`). Units run
`--jobs` at a time; each result is written to docs/results/baselines-results.json as it comes, and a rerun
skips the units already there (a unit is its arch, resolved training settings, seed and budget).

Flips (text): each text architecture is also trained as an update's old model, on the first half of
the training split (`old_limit`, as the text demo's v1 and the fidelity text table's old), and
the table reports NFR old → new between the models of one seed, beside the baseline's own NFR (the
TF-IDF model fitted on the same half, then on all of it); eval predictions of text units are kept in
the results for that.

Budgets: an architecture too slow for 2 CPUs trains on the first `train_limit` samples of the
training split (`BUDGETS`, with the reason); its baseline is fitted on that same slice, and both
are scored on the same regression-eval samples.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict
from datetime import date
from multiprocessing import get_context
from typing import Any

from benchmarks.quality.baselines_grid import (
    CANDIDATES,
    HALF,
    IMAGE_ARCHS,
    TEXT_ARCHS,
    TEXT_SETS,
    Unit,
    budget_of,
    data_of,
    key_of,
    old_limit,
    sets_of,
    short_name,
    spec_of,
)
from benchmarks.report import RESULTS_DIR

RESULTS = RESULTS_DIR / "baselines-results.json"


def run_unit(unit: Unit) -> dict[str, Any]:
    """Train the unit's model as the pipeline would (one thread) and score it: ER on the eval split,
    and on the val split in the sweep."""
    import torch

    from orchestrator.planning.model_inputs import image_inputs, text_inputs
    from orchestrator.planning.plan import data_request, train_config
    from pipelines.spec import WorkerResources
    from workers.data.input_spec import InputSpec
    from workers.metrics import error_rate
    from workers.models.checkpoints import ModelSettings
    from workers.models.hf import hf_directory, pretrained_state, read_directory
    from workers.models.predict import predict_logits
    from workers.models.starting_weights import load_weights
    from workers.names import is_hf
    from workers.tasks.resolve import cached_splits
    from workers.training.trainer import train

    torch.set_num_threads(1)
    spec = spec_of(unit)
    config = train_config(spec, unit.seed, WorkerResources())
    splits = cached_splits(data_request(spec))
    text = splits.modality == "text"
    inputs = text_inputs(spec, splits.train) if text else image_inputs(spec, splits.train)
    reads = inputs or InputSpec.image(splits.in_channels, splits.image_size)
    config_json = read_directory(str(hf_directory(unit.arch))).config if is_hf(unit.arch) else None
    settings = ModelSettings(unit.arch, splits.num_classes, reads, config_json)
    model = settings.build(unit.seed)
    if is_hf(unit.arch):  # fine-tuned from the directory's weights, as the pipeline's tasks start it
        load_weights(model, pretrained_state(str(hf_directory(unit.arch))), unit.arch, stem_may_differ=False)
    started = time.perf_counter()
    result = train(model, splits.train, config, settings=settings)
    seconds = time.perf_counter() - started
    predictions = predict_logits(model, splits.eval, inputs=reads).argmax(1)
    scores: dict[str, Any] = {"eval_error_rate": error_rate(predictions, splits.eval.labels)}
    if text:  # for NFR between an old and a new unit of one seed
        scores["eval_predictions"] = digits(predictions.tolist())
    if unit.part == "sweep":
        scores["val_error_rate"] = error_rate(predict_logits(model, splits.val, inputs=reads), splits.val.labels)
    return {
        **asdict(unit),
        "key": key_of(unit),
        "dataset": unit.data_set,
        "config": {k: v for k, v in asdict(config).items() if k in ("optimizer", "lr", "weight_decay", "epochs")}
        | {"batch_size": config.batch_size, "warmup_epochs": config.warmup_epochs, "augment": config.augment},
        "max_length": inputs.max_length if text and inputs is not None else None,
        "train_samples": len(splits.train),
        "eval_samples": len(splits.eval),
        "final_loss": result.history[-1].loss,
        "seconds": round(seconds, 1),
        **scores,
    }


DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def digits(classes: list[int]) -> str:
    """Eval predictions kept compact in the results: one base-36 character per sample (classes < 36;
    `int(c, 36)` reads one back)."""
    if classes and max(classes) >= len(DIGITS):
        raise ValueError(f"predictions are kept as one character per sample: at most {len(DIGITS)} classes")
    return "".join(DIGITS[c] for c in classes)


def pixels(split: Any) -> Any:
    """An image split as an N×(C·H·W) float array in [0, 1]."""
    return split.images.flatten(1).numpy() / 255.0


def baseline(
    arch_kind: str,
    train_limit: int | None,
    eval_limit: int | None,
    old_limit: int | None = HALF["tweets"],
    dataset: str = "tweets",
    val_fraction: float = 0.1,
) -> dict[str, Any]:
    """The baseline a user would pick, fitted on the training slice and scored on the eval slice:
    text, TF-IDF (word 1–2-grams, sublinear tf, min_df 2) + logistic regression (C 4), fitted again
    on the first `old_limit` training samples (the old models' slice: `train_limit` ranks them the
    same way; None: all) as its own old model, for NFR; images, logistic regression on the pixels / 255
    (C 1, lbfgs). `dataset`: a text set of TEXT_SETS; `val_fraction`: the data's (it decides which
    samples the training pool holds). Deterministic: one fit."""
    from sklearn.linear_model import LogisticRegression

    from orchestrator.planning.plan import data_request
    from pipelines.spec import parse_spec
    from workers.metrics import error_rate, negative_flip_rate
    from workers.tasks.resolve import cached_splits

    def splits_of(limit: int | None) -> Any:
        source = TEXT_SETS[dataset] if arch_kind == "text" else {}
        arch = "text-bag" if arch_kind == "text" else "mlp"
        data = {**source, "train_limit": limit, "eval_limit": eval_limit, "val_fraction": val_fraction}
        return cached_splits(data_request(parse_spec({"model": "b", "version": "b", "arch": arch, "data": data})))

    splits: Any = splits_of(train_limit)
    started = time.perf_counter()
    flips: dict[str, Any] = {}
    if arch_kind == "text":
        predict = tfidf_predictor(splits.train.texts, splits.train.labels)
        old_train = splits_of(old_limit).train
        old_predict = tfidf_predictor(old_train.texts, old_train.labels)
        old_eval, new_eval = old_predict(splits.eval), predict(splits.eval)
        flips = {
            "old_limit": old_limit,
            "old_train_samples": len(old_train),
            "old_eval_error_rate": error_rate(old_eval, splits.eval.labels),
            "eval_nfr": negative_flip_rate(old_eval, new_eval, splits.eval.labels),
            "eval_labels": digits(splits.eval.labels.tolist()),  # the report's NFR of the text units
        }
        name = "TF-IDF word 1–2-grams + logistic regression (C 4)"
    else:
        x_train = pixels(splits.train)
        fitted = LogisticRegression(C=1.0, max_iter=500).fit(x_train, splits.train.labels.numpy())
        predict = lambda split: fitted.predict(pixels(split))  # noqa: E731
        name = "logistic regression on pixels (C 1)"

    def er(split: Any) -> float:
        return error_rate(predict(split), split.labels)

    return {
        "kind": arch_kind,
        "dataset": dataset if arch_kind == "text" else "fashion-mnist",
        "name": name,
        "train_limit": train_limit,
        "eval_limit": eval_limit,
        "train_samples": len(splits.train),
        "eval_samples": len(splits.eval),
        "eval_error_rate": er(splits.eval),
        "val_error_rate": er(splits.val),
        **flips,
        "seconds": round(time.perf_counter() - started, 1),
    }


def tfidf_predictor(texts: list[str], labels: Any) -> Any:
    """The text baseline fitted on (texts, labels): TF-IDF (word 1–2-grams, sublinear tf, min_df 2) +
    logistic regression (C 4); returns split → predicted class ids (an array)."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    vectorizer = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=2)
    fitted = LogisticRegression(C=4.0, max_iter=3000).fit(vectorizer.fit_transform(texts), labels.numpy())
    return lambda split: fitted.predict(vectorizer.transform(split.texts))


def load() -> dict[str, Any]:
    if RESULTS.exists():
        return json.loads(RESULTS.read_text())
    return {"units": [], "baselines": []}


def save(results: dict[str, Any]) -> None:
    results["machine"] = f"{platform.machine()}, {platform.python_version()}"
    results["date"] = date.today().isoformat()
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")


def units_of(part: str, archs: list[str], seeds: int, sets: list[str]) -> Iterator[Unit]:
    for arch in archs:
        for dataset in [d for d in sets_of(arch) if d in sets or arch not in TEXT_ARCHS]:
            named = "" if dataset == sets_of(arch)[0] else dataset  # the first set: keys as before sets
            if part == "sweep":
                for candidate in CANDIDATES.get(arch, []):
                    yield Unit("sweep", arch, 0, candidate, dataset=named)
            else:
                budget = budget_of(arch, dataset)
                for seed in range(min(seeds, budget.seeds)):
                    yield Unit("table", arch, seed, dataset=named)
                if arch in TEXT_ARCHS:
                    for seed in range(min(seeds, budget.old_seeds)):
                        yield Unit("table", arch, seed, old=True, dataset=named)


def needs_predictions(unit: dict[str, Any]) -> bool:
    """Whether a unit's eval predictions enter an NFR: a text unit of a seed with an old model."""
    budget = budget_of(unit["arch"], unit.get("dataset") or sets_of(unit["arch"])[0])
    return unit["part"] == "table" and unit["arch"] in TEXT_ARCHS and unit["seed"] < budget.old_seeds


def baseline_slices(archs: list[str], sets: list[str]) -> set[tuple[str, str, int | None, int | None, int | None]]:
    """(kind, set, train_limit, eval_limit, old_limit) of the baselines the archs' rows compare with."""
    slices = set()
    for arch in archs:
        for dataset in [d for d in sets_of(arch) if d in sets or arch not in TEXT_ARCHS]:
            data = data_of(arch, dataset=dataset)
            text = arch in TEXT_ARCHS
            kind = "text" if text else "image"
            slices.add(
                (kind, dataset, data["train_limit"], data["eval_limit"], old_limit(arch, dataset) if text else None)
            )
    return slices


def slice_of(b: dict[str, Any]) -> tuple[str, str, int | None, int | None, int | None]:
    """A baseline record's slice (records from before text sets: the tweets, old half by HALF)."""
    text = b["kind"] == "text"
    dataset = b.get("dataset", "tweets" if text else "fashion-mnist")
    return (b["kind"], dataset, b["train_limit"], b["eval_limit"], b.get("old_limit") if text else None)


def split_sizes(unit: Unit, sizes: dict[str, tuple[int, int]]) -> tuple[int, int]:
    """(training, eval) samples of the unit's splits as the data plane now gives them (`sizes`
    caches them by the spec's data)."""
    from orchestrator.planning.plan import data_request
    from workers.tasks.resolve import cached_splits

    data = json.dumps(data_of(unit.arch, unit.old, unit.data_set), sort_keys=True)
    if data not in sizes:
        splits = cached_splits(data_request(spec_of(unit)))
        sizes[data] = (len(splits.train), len(splits.eval))
    return sizes[data]


def drop_stale(results: dict[str, Any], archs: list[str], sets: list[str]) -> int:
    """Remove the archs' units trained on other samples than their splits now hold (before the data
    plane's redesign, issue 49, changed them): their keys are unchanged, so they are trained again."""
    sizes: dict[str, tuple[int, int]] = {}
    kept, dropped = [], 0
    for record in results["units"]:
        unit = Unit(
            record["part"],
            record["arch"],
            record["seed"],
            record["train"],
            record.get("old", False),
            record.get("dataset", ""),
        )
        ours = unit.arch in archs and (unit.arch not in TEXT_ARCHS or unit.data_set in sets)
        if ours and (record["train_samples"], record["eval_samples"]) != split_sizes(unit, sizes):
            dropped += 1
        else:
            kept.append(record)
    results["units"] = kept
    return dropped


def run_part(part: str, archs: list[str], seeds: int, jobs: int, sets: list[str]) -> None:
    """Train every unit of `part` not yet in the results (or trained on other samples than the splits
    now hold), `jobs` at a time; then fit the baselines of every slice the archs use."""
    results = load()
    stale = drop_stale(results, archs, sets)
    # text units from before NFR was reported keep no predictions: trained again where NFR needs them
    results["units"] = [u for u in results["units"] if "eval_predictions" in u or not needs_predictions(u)]
    # text baselines whose old model was not fitted on the old units' own slice: fitted again
    results["baselines"] = [b for b in results["baselines"] if b["kind"] != "text" or "old_limit" in b]
    done = {(u["part"], u["key"]) for u in results["units"]}
    todo = [u for u in units_of(part, archs, seeds, sets) if (u.part, key_of(u)) not in done]
    # a table unit whose training the sweep already ran (its recipe is that candidate) is reused
    swept = {u["key"]: u for u in results["units"] if u["part"] == "sweep"}
    for unit in [u for u in todo if u.part == "table" and key_of(u) in swept]:
        results["units"].append({**swept[key_of(unit)], "part": "table", "train": {}})
        todo.remove(unit)
    save(results)
    print(f"{part}: {len(todo)} trainings to run ({stale} stale units dropped), {jobs} at a time", flush=True)
    with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn")) as pool:
        futures = {pool.submit(run_unit, unit): unit for unit in todo}
        for future in as_completed(futures):
            record = future.result()
            results["units"].append(record)
            save(results)
            print(
                f"{short_name(record['arch'])} on {record['dataset']}{' (old)' if record['old'] else ''} seed "
                f"{record['seed']} {record['config']}: eval ER {100 * record['eval_error_rate']:.2f} %, "
                f"{record['seconds']:.0f} s",
                flush=True,
            )
    have = {slice_of(b) for b in results["baselines"]}
    for kind, dataset, train_limit, eval_limit, old in sorted(baseline_slices(archs, sets) - have, key=str):
        results["baselines"].append(baseline(kind, train_limit, eval_limit, old, dataset))
        save(results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("sweep", "table", "report"), required=True)
    parser.add_argument("--archs", nargs="+", default=[*TEXT_ARCHS, *IMAGE_ARCHS])
    parser.add_argument("--sets", nargs="+", default=list(TEXT_SETS), choices=list(TEXT_SETS))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    if args.part == "report":
        from benchmarks.quality.baselines_report import write_report

        write_report(load())
        return
    run_part(args.part, args.archs, args.seeds, args.jobs, args.sets)


if __name__ == "__main__":
    main()
