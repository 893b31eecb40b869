"""`congruent demo` and `congruent report` end to end: v1 and v2 (method auto) on Ray, registered in a
local MLflow store, and the HTML report rendered by a real headless browser (Debian's chromium)."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from mlflow import MlflowClient
from PIL import Image

DEMO = ["--epochs", "1", "--m", "2", "--train-limit", "2000", "--eval-limit", "500"]


def _env(out):
    # mlflow.set_registry_uri in earlier tests leaves MLFLOW_REGISTRY_URI in this process's environment
    env = {
        k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI", "RAY_ADDRESS")
    }
    return {**env, "MLFLOW_TRACKING_URI": f"sqlite:///{out / 'mlflow.db'}"}


def _client(out):
    uri = f"sqlite:///{out / 'mlflow.db'}"
    return MlflowClient(tracking_uri=uri, registry_uri=uri)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    env = {k: v for k, v in _env(out).items() if k != "MLFLOW_TRACKING_URI"}  # the demo picks its own store
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", "demo", "--out", str(out), *DEMO],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        cwd=out,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return out, done.stdout


@pytest.mark.bench
def test_demo_registers_v1_and_auto_v2_and_prints_the_comparison(demo):
    out, printed = demo
    client = _client(out)
    versions = sorted(client.search_model_versions("name='congruent-demo'"), key=lambda v: int(v.version))
    assert [v.tags["label"] for v in versions] == ["v1", "v2"]
    assert [v.tags["method"] for v in versions] == ["none", "auto"]
    assert versions[1].tags["parent_version"] == "1"
    chosen = versions[1].tags["auto_choice"]
    assert f"{100 * float(versions[1].tags['nfr']):.2f}%" in printed  # the table prints the registry's own figures
    # m = 2: every candidate fits; those after the first that failed its test are left out untrained, with why
    record = json.loads((out / "v2" / "auto.json").read_text())
    trained = [c["name"] for c in record["candidates"]]
    left = [name for name, _ in record["skipped"]]
    assert {"none", "kd", "fd-lm", "elodi-legacy", "elodi"} <= {*trained, *left}  # and bcwi, proximal: other arch
    assert all(f" {name} " in printed for name in trained) and all(f"left out {name}: " in printed for name in left)
    assert f"auto shipped {chosen}" in printed and "the demo's promise" in printed
    assert "mlflow ui --backend-store-uri" in printed
    # it ends with the commands that serve v1 as the champion, shadowing v2
    serve = f"congruent serve congruent-demo --shadow {versions[1].version}"
    assert printed.rstrip().endswith(f"congruent promote congruent-demo 1 --max-nfr 0 && {serve}")
    assert str(out / "report.html") in printed
    labels = np.load(out / "v2" / "predictions" / "labels.npy")
    assert labels.shape == (500,)


@pytest.mark.bench
def test_report_is_self_contained_logged_and_renders_in_chromium(demo, tmp_path):
    out, _ = demo
    report = tmp_path / "report.html"
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", "report", "congruent-demo", "--out", str(report)],
        capture_output=True,
        text=True,
        timeout=300,
        env=_env(out),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    page = report.read_text()
    sections = (
        "Version chain",
        "Pairwise NFR",
        "Error rate against NFR",
        "Method auto",
        "Flip explorer: v2 against v1",
    )
    for section in sections:
        assert section in page
    assert "http://" not in page and "https://" not in page and "<link" not in page  # nothing fetched
    images = page.count("<img ")
    assert images >= 4  # heatmap, scatter, per-class bars, thumbnails

    client = _client(out)
    run_id = client.get_model_version("congruent-demo", "2").run_id
    assert [a.path for a in client.list_artifacts(run_id, "report")] == ["report/report.html"]

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "Debian's chromium is installed by `make test` (Makefile: system-services)"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    dom = subprocess.run(
        [chromium, *flags, "--dump-dom", report.as_uri()], capture_output=True, text=True, timeout=120
    ).stdout
    assert f'data-images-drawn="{images}/{images}"' in dom  # every figure decoded by the browser
    shot = tmp_path / "report.png"
    subprocess.run(
        [chromium, *flags, f"--screenshot={shot}", "--window-size=1200,2400", report.as_uri()],
        capture_output=True,
        timeout=120,
        check=True,
    )
    pixels = np.asarray(Image.open(shot).convert("RGB")).astype(int)
    assert pixels.shape == (2400, 1200, 3)
    reds = (pixels[..., 0] > 150) & (pixels[..., 1] < 90) & (pixels[..., 2] < 90)
    assert reds.sum() > 2000  # the heatmap's and the bars' red are on screen, not just text
    shutil.copy(shot, out / "report-screenshot.png")


def test_the_demo_verdict_by_hand():
    """The shipped model against auto's no-treatment candidate: NFR ≤ 0.8× and ER ≤ +0.3 pt."""
    from orchestrator.driver.demo import Verdict

    kept = Verdict("kd", none_nfr=0.020, none_er=0.100, nfr=0.015, er=0.102)
    assert kept.ratio == pytest.approx(0.75) and kept.er_increase == pytest.approx(0.002)
    assert [ok for _, ok in kept.checks()] == [True, True] and "0.8×" in kept.checks()[0][0]
    assert [ok for _, ok in Verdict("kd", 0.020, 0.100, 0.017, 0.104).checks()] == [False, False]  # 0.85×, +0.4 pt
    assert [ok for _, ok in Verdict("none", 0.020, 0.100, 0.020, 0.100).checks()] == [False, True]  # nothing helped


def test_the_verdict_reads_the_eval_figures_of_auto_s_record():
    from orchestrator.driver.demo import verdict

    class Result:
        auto = {
            "chosen": "kd",
            "candidates": [
                {"name": "none", "nfr": 0.03, "error_rate": 0.14, "val_nfr": 0.0, "val_error_rate": 0.0},
                {"name": "kd", "nfr": 0.012, "error_rate": 0.139, "val_nfr": 0.0, "val_error_rate": 0.0},
            ],
        }

    v = verdict(Result())  # type: ignore[arg-type]
    assert (v.chosen, v.none_nfr, v.nfr, v.none_er, v.er) == ("kd", 0.03, 0.012, 0.14, 0.139)
    assert v.ratio == pytest.approx(0.4)


@pytest.mark.bench
def test_the_text_demo_registers_its_versions_and_reports_flipped_tweets(tmp_path):
    """`congruent demo --text` at toy scale: v1 (text-bag, half the tweets) and v2 (auto) registered
    under congruent-demo-text, the verdict against 0.8× no treatment printed, and the report listing
    flipped tweets as text."""
    out = tmp_path / "demo-text"
    env = {k: v for k, v in _env(out).items() if k != "MLFLOW_TRACKING_URI"}
    # 3 epochs: fastText's small initial embeddings leave a 1-epoch toy model on the majority class (no flips)
    options = ["--epochs", "3", "--m", "2", "--train-limit", "1500", "--eval-limit", "600", "--quiet"]
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", "demo", "--text", "--out", str(out), *options],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    client = _client(out)
    versions = sorted(client.search_model_versions("name='congruent-demo-text'"), key=lambda v: int(v.version))
    assert [v.tags["label"] for v in versions] == ["v1", "v2"]
    assert [v.tags["arch"] for v in versions] == ["text-bag"] * 2
    assert "NFR ≤ 0.8× no treatment's" in done.stdout and "ER ≤ no treatment's + 0.3 pt" in done.stdout
    from markupsafe import escape  # as the report's Jinja escapes

    from workers.tasks.records import DataRequest
    from workers.tasks.resolve import cached_splits

    report = (out / "report.html").read_text()
    tweets = cached_splits(DataRequest("tweet-sentiment", train_limit=1500, eval_limit=600)).eval.texts
    shown = [text for text in tweets if f"<tr><td>{escape(text)}</td>" in report]
    assert shown and "eval image" not in report  # flipped tweets as text, no thumbnails


def test_the_demo_specs_are_the_settings_docs_benchmarks_records():
    """The image demo: v1 mlp-small on 8,000 images of its half, v2 mlp auto at α 0.3 on 8,000 of all;
    the text demo: v1 on half the tweets, v2 auto over proximal, bcwi and kd at auto's own bound."""
    from pathlib import Path

    from orchestrator.driver.demo import DemoSettings, demo_specs, v1_half
    from pipelines.spec import parse_spec

    v1, v2 = (parse_spec(d) for d in demo_specs(DemoSettings(Path("/tmp/demo"))))
    assert (v1.arch, v1.data.subset, v1.data.train_limit) == ("mlp-small", "half-samples", 8000)
    assert (v2.arch, v2.data.subset, v2.data.train_limit) == ("mlp", "all", 8000)
    assert v2.method.name == "auto" and v2.method.alpha == 0.3 and v2.method.max_er_increase == 0.003
    t1, t2 = (parse_spec(d) for d in demo_specs(DemoSettings(Path("/tmp/demo"), text=True, train_limit=None)))
    assert (t1.data.subset, t1.data.train_limit, t2.data.train_limit) == ("half-samples", None, None)
    assert t2.method.candidates == ("proximal", "bcwi", "kd") and t2.method.max_er_increase == 0.003
    assert t1.arch == t2.arch == "text-bag"  # bcwi applies
    assert v1_half({"train_limit": 1500}) == {"train_limit": 750}
