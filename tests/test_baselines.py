"""The baselines benchmark's tables (benchmarks/quality/baselines_report.py) on hand-made results."""

import pytest

from benchmarks.quality.baselines import digits
from benchmarks.quality.baselines_grid import MINILM, Unit, data_of, key_of, old_limit
from benchmarks.quality.baselines_report import flip_rows, sweep_rows


def unit(seed: int, old: bool, predictions: str, arch: str = "text-linear", dataset: str = "") -> dict:
    made = Unit("table", arch, seed, old=old, dataset=dataset)
    return {
        "part": "table",
        "arch": arch,
        "seed": seed,
        "old": old,
        "dataset": made.data_set,
        "key": key_of(made),
        "train_samples": 10 if old else 20,
        "eval_samples": len(predictions),
        "eval_predictions": predictions,
    }


def base(labels: str, arch: str = "text-linear", dataset: str = "tweets") -> dict:
    data = data_of(arch, dataset=dataset)
    return {
        "kind": "text",
        "dataset": dataset,
        "name": "TF-IDF",
        "train_limit": data["train_limit"],
        "eval_limit": data["eval_limit"],
        "old_limit": old_limit(arch, dataset),
        "old_train_samples": 10,
        "train_samples": 20,
        "eval_samples": len(labels),
        "eval_labels": labels,
        "eval_error_rate": 0.25,
        "old_eval_error_rate": 0.5,
        "eval_nfr": 0.0,
    }


def test_the_flips_table_counts_nfr_between_the_old_and_new_model_of_each_seed():
    """labels 0 1 2 0. Seed 0: old 0 1 1 1 (right on samples 0, 1), new 0 0 2 0 (wrong on 1): NFR 1/4.
    Seed 1: old 0 1 2 0 (all right), new 0 1 2 1 (wrong on 3): NFR 1/4. The new models of seeds 0 and
    1 disagree on samples 1 and 3."""
    results = {
        "baselines": [base("0120")],
        "units": [unit(0, True, "0111"), unit(0, False, "0020"), unit(1, True, "0120"), unit(1, False, "0121")],
    }
    rows = flip_rows(results)
    assert rows[0][:6] == ["tweets", "baseline: TF-IDF", "10 → 20 / 4", "50.00", "25.00", "**0.00**"]
    linear = rows[1]
    assert linear[:3] == ["tweets", "`text-linear`", "10 → 20 / 4"]
    assert linear[3] == "25.00 ± 35.36 (2 seeds)"  # ER old: 0.5 and 0.0
    assert linear[4] == "25.00 ± 0.00 (2 seeds)"  # ER new: 0.25 and 0.25
    assert linear[5] == "**25.00 ± 0.00 (2 seeds)**"  # NFR 1/4 in both seeds
    assert linear[6] == "+25.00"
    assert linear[7] == "2 (50.00 %)"


def test_a_set_of_twenty_classes_and_units_on_other_samples():
    """20 Newsgroups' classes 10…19 are kept as letters; a unit scored on another eval split (before
    the splits changed) is left out rather than compared sample by sample with the wrong labels."""
    assert digits([0, 9, 10, 19]) == "09aj"
    labels = digits([12, 3, 19])
    old, new = digits([12, 3, 5]), digits([12, 4, 19])  # one negative flip: sample 1
    results = {
        "baselines": [base(labels, MINILM, "20newsgroups")],
        "units": [unit(0, True, old, MINILM, "20newsgroups"), unit(0, False, new, MINILM, "20newsgroups")],
    }
    rows = flip_rows(results)
    assert rows[1][1] == "`hf:all-MiniLM-L6-v2`" and rows[1][5] == "**33.33 (1 seed)**"
    results["units"][1]["eval_samples"] = 4  # another split
    assert len(flip_rows(results)) == 0


def test_the_sweep_table_means_a_candidate_over_its_sets():
    config = {"optimizer": "adamw", "lr": 2e-5, "weight_decay": 0.01, "epochs": 3, "batch_size": 32}

    def swept(dataset: str, val: float) -> dict:
        return {
            "part": "sweep",
            "arch": MINILM,
            "dataset": dataset,
            "config": config,
            "val_error_rate": val,
            "eval_error_rate": val,
            "final_loss": 0.5,
            "seconds": 10,
        }

    results = {"units": [swept("tweets", 0.30), swept("reuters-r8", 0.10)], "baselines": []}
    assert sweep_rows(results)[0][2:4] == ["tweets 30.00; reuters-r8 10.00", "—"]  # not yet on every set
    results["units"].append(swept("20newsgroups", 0.20))
    assert sweep_rows(results)[0][3] == "20.00"


def _heldout_unit(arch: str, seed: int, chosen: str, shipped: tuple[float, float]) -> dict:
    none = {"name": "none", "error_rate": 0.050, "nfr": 0.010}
    other = {"name": chosen, "error_rate": shipped[0], "nfr": shipped[1]}
    return {"arch": arch, "seed": seed, "chosen": chosen, "candidates": [none, other], "v1_error_rate": 0.06}


def test_the_heldout_target_is_nfr_at_most_0_7x_no_treatments_at_at_most_half_a_point_of_er():
    from benchmarks.quality.heldout_report import verdict

    assert verdict(_heldout_unit("text-bag", 0, "kd", (0.054, 0.007))) == pytest.approx((0.7, 0.004, True))
    assert not verdict(_heldout_unit("text-bag", 0, "kd", (0.056, 0.005)))[2]  # +0.6 pt of ER
    assert not verdict(_heldout_unit("text-bag", 0, "kd", (0.040, 0.0075)))[2]  # 0.75×
    ratio, increase, met = verdict(_heldout_unit("text-bag", 0, "none", (0.050, 0.010)))
    assert (ratio, met) == (1.0, False)  # shipping no treatment meets no flip target


def test_the_heldout_report_has_a_row_per_run_and_the_baseline_per_training_size():
    from benchmarks.quality.heldout_report import report

    def unit(arch: str, seed: int, chosen: str, shipped: tuple[float, float], limit: int | None) -> dict:
        return {**_heldout_unit(arch, seed, chosen, shipped), "n_eval": 1346, "seconds": 60, "train_limit": limit}

    units = {
        "text-bag/0/None": unit("text-bag", 0, "kd", (0.05, 0.005), None),
        "text-linear/1/None": unit("text-linear", 1, "bcwi", (0.06, 0.005), None),
        "text-bag/0/1000": unit("text-bag", 0, "elodi", (0.05, 0.006), 1000),
    }
    base = {"old_error_rate": 0.09, "error_rate": 0.08, "nfr": 0.012, "train_samples": 4596, "old_train_samples": 2298}
    small = {**base, "train_limit": 1000, "train_samples": 1000, "old_train_samples": 500, "nfr": 0.03}
    baselines = {"None": {**base, "train_limit": None}, "1000": small}
    text = report({"units": units, "date": "2026-12-03", "baselines": baselines})
    rows = [line.split(" | ") for line in text.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert [(r[0], r[1], r[5]) for r in rows] == [
        ("| `text-bag`", "2,298 → 4,596", "kd"),
        ("| `text-linear`", "2,298 → 4,596", "bcwi"),
        ("| TF-IDF + LR (C 4)", "2,298 → 4,596", ""),
        ("| `text-bag`", "500 → 1,000", "elodi"),
        ("| TF-IDF + LR (C 4)", "500 → 1,000", ""),
    ]
    assert "0.50×" in rows[0][7] and "+1.00 pt" in rows[1][8] and "**missed**" in rows[1][9]
    assert "**1.20 %**" in rows[2][4] and "**3.00 %**" in rows[4][4] and "met in 2 of 3 runs" in text


def test_a_heldout_series_with_auto_s_own_bound_is_named_apart_and_marked_in_its_rows():
    from benchmarks.quality.heldout_report import report, unit_key

    assert unit_key("text-bag", 0, None) == "text-bag/0/None"  # the defaults' series, as recorded before
    assert unit_key("text-bag", 0, None, 0.005) == "text-bag/0/None/max_er_increase=0.005"
    default = {**_heldout_unit("text-bag", 0, "none", (0.05, 0.01)), "n_eval": 3000, "seconds": 60, "train_limit": None}
    bounded = {**default, "chosen": "kd", "max_er_increase": 0.005}
    bounded["candidates"] = [*default["candidates"], {"name": "kd", "error_rate": 0.052, "nfr": 0.006}]
    base = {"old_error_rate": 0.3, "error_rate": 0.28, "nfr": 0.06, "train_samples": 40, "old_train_samples": 20}
    units = {unit_key("text-bag", 0, None, 0.005): bounded, unit_key("text-bag", 0, None): default}
    text = report({"units": units, "date": "2026-12-06", "baselines": {"None": {**base, "train_limit": None}}}, "sotu")
    rows = [line.split(" | ") for line in text.splitlines() if line.startswith("| `")]
    assert [(r[0], r[5]) for r in rows] == [("| `text-bag`", "none"), ("| `text-bag`, auto's bound +0.5 pt", "kd")]
    assert "--set sotu" in text and "instead of the default +0.3 pt" in text and "met in 1 of 2 runs" in text
