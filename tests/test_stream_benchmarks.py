"""The streaming benchmarks' reports (issue 33): each figure and verdict of a results file reaches
its docs section; no Ray, no training."""


def test_the_streaming_benchmark_reports_each_ratio_and_the_text_target():
    from benchmarks.streaming.throughput import report

    def row(data, training, path, rate, first, whole):
        return {
            "data": data,
            "training": training,
            "path": path,
            "samples_per_second": rate,
            "first_epoch_samples_per_second": first,
            "wall_seconds": 100.0 / whole,
        }

    results = {
        "epochs": 3,
        "date": "2026-11-27",
        "machine": "2 CPU cores",
        "torch": "t",
        "ray": "r",
        "tweet_splits": {"train": 100, "val": 10, "eval": 20},
        "png_decode_per_core": 3000.0,
        "rows": [
            row("tweets", "plain", "in memory", 1000.0, 900.0, 950.0),
            row("tweets", "plain", "streamed", 650.0, 300.0, 475.0),
            row("tweets", "elodi", "in memory", 400.0, 400.0, 400.0),
            row("tweets", "elodi", "streamed", 300.0, 200.0, 280.0),
        ],
    }
    text = report(results)
    assert "| tweets | plain | 1,000 | 650 | **0.65×** | 0.33× | 0.50× |" in text
    assert "plain 0.65× over epochs 2–3 (missed), 0.50× by the whole training's wall time (missed); elodi" in text
    assert "elodi 0.75× over epochs 2–3 (met), 0.70× by the whole training's wall time (met)" in text


def test_the_stream_teachers_benchmark_reports_each_path_against_todays_pool():
    from benchmarks.streaming.teachers_report import IN_TASK, PLAIN, report

    def row(path, rate, first, sent=None):
        extra = {} if sent is None else {"bytes_per_request": sent}
        return {
            "data": "tweets",
            "path": path,
            "samples_per_second": rate,
            "first_epoch_samples_per_second": first,
            **extra,
        }

    results = {
        "epochs": 3,
        "date": "2026-11-28",
        "machine": "2 CPU cores",
        "torch": "t",
        "ray": "r",
        "images": 100,
        "agreement": {
            "a: max |Δ value|": 0.0,
            "a: classes equal": 1.0,
            "b: max |Δ value|": 0.002,
            "b: classes equal": 0.99,
        },
        "rows": [
            row(PLAIN[0], 2000.0, 1000.0),
            row(PLAIN[1], 1200.0, 600.0),
            row("pool, split in memory", 1000.0, 900.0, 255),
            row("pool, streamed batch", 450.0, 400.0, 34000),
            row(IN_TASK, 360.0, 300.0),
        ],
    }
    text = report(results)
    assert "| tweets | pool, split in memory | 1,000 | **1.00×** | 900 | 255 |" in text
    assert "| tweets | pool, streamed batch | 450 | **0.45×** | 400 | 34,000 |" in text
    assert "| tweets | *plain training, no teachers: streamed / in memory* |  | *0.60×* |  |  |" in text
    assert "top-5 values within 2.0e-03, 99 % of the classes equal" in text
    assert "The two forms are not within 10 % of each other, because the stream is not; both stay." in text
    assert "they ran against the streamed pool at 0.80× on tweets;" in text


def test_the_stream_fidelity_benchmark_says_whether_the_paths_differ_within_noise():
    from benchmarks.streaming.fidelity import report

    seeds = [
        {"seed": 0, "in memory": 0.20, "streamed": 0.21},
        {"seed": 1, "in memory": 0.22, "streamed": 0.22},
        {"seed": 2, "in memory": 0.21, "streamed": 0.23},
    ]
    apart = [{**row, "streamed": row["in memory"] + 0.05} for row in seeds]
    text = report({"epochs": 4, "date": "d", "machine": "m", "torch": "t", "data": {"same": seeds, "apart": apart}})
    assert "| same | 3 | 21.00 ± 1.00 | 22.00 ± 1.00 | +1.00 | 2.00 | **yes** |" in text
    assert "| apart | 3 | 21.00 ± 1.00 | 26.00 ± 1.00 | +5.00 | 2.00 | **no** |" in text
