"""The baselines benchmark's flips table (benchmarks/baselines_report.py) on hand-made results."""

from benchmarks.baselines_grid import Unit, key_of
from benchmarks.baselines_report import flip_rows


def unit(seed: int, old: bool, predictions: str) -> dict:
    made = Unit("table", "text-linear", seed, old=old)
    return {
        "part": "table",
        "arch": "text-linear",
        "seed": seed,
        "old": old,
        "key": key_of(made),
        "eval_predictions": predictions,
    }


def test_the_flips_table_counts_nfr_between_the_old_and_new_model_of_each_seed():
    """labels 0 1 2 0. Seed 0: old 0 1 1 1 (right on samples 0, 1), new 0 0 2 0 (wrong on 1): NFR 1/4.
    Seed 1: old 0 1 2 0 (all right), new 0 1 2 1 (wrong on 3): NFR 1/4. The new models of seeds 0 and
    1 disagree on samples 1 and 3."""
    results = {
        "baselines": [
            {
                "kind": "text",
                "name": "TF-IDF",
                "eval_labels": "0120",
                "eval_error_rate": 0.25,
                "old_eval_error_rate": 0.5,
                "eval_nfr": 0.0,
            }
        ],
        "units": [unit(0, True, "0111"), unit(0, False, "0020"), unit(1, True, "0120"), unit(1, False, "0121")],
    }
    rows = flip_rows(results)
    assert rows[0][:4] == ["baseline: TF-IDF", "50.00", "25.00", "**0.00**"]
    linear = rows[1]
    assert linear[0] == "`text-linear`"
    assert linear[1] == "25.00 ± 35.36 (2 seeds)"  # ER old: 0.5 and 0.0
    assert linear[2] == "25.00 ± 0.00 (2 seeds)"  # ER new: 0.25 and 0.25
    assert linear[3] == "**25.00 ± 0.00 (2 seeds)**"  # NFR 1/4 in both seeds
    assert linear[4] == "+25.00"
    assert linear[5] == "2 (50.00 %)"
