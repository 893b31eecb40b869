"""The fidelity benchmark's --quick mode end to end (the pipeline, not the claim), and its pure parts."""

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks.fidelity import trainings
from benchmarks.fidelity.cli import invocations
from benchmarks.fidelity.investigate import disagreement, findings, variant_mode
from benchmarks.fidelity.modes import MODES
from benchmarks.fidelity.report import invocation_lines
from benchmarks.fidelity.results import ensemble, mean_std, summarise
from ray_nodes import RAY_TEST_ENV

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fidelity")
    out = folder / "docs" / "benchmarks" / "fidelity.md"
    env = {**os.environ, **RAY_TEST_ENV, "PYTHONPATH": str(ROOT)}
    command = [
        sys.executable,
        "-m",
        "benchmarks.fidelity",
        "--quick",
        "--out",
        str(out),
        "--work",
        str(folder / "work"),
    ]
    finished = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert finished.returncode == 0, finished.stderr[-3000:]
    record = json.loads((folder / "work" / "quick" / "results.json").read_text())
    return out, record, finished.stdout


@pytest.mark.bench
def test_quick_writes_section_table_and_plot(quick_run):
    out, record, stdout = quick_run
    text = out.read_text()
    assert "## Fidelity, small scale (CPU): the papers' ER/NFR ordering on Fashion-MNIST" in text
    assert "`python -m benchmarks.fidelity --quick`" in text
    assert "![ER–NFR scatter](../results/fidelity-scatter.png)" in text
    assert (out.parent.parent / "results" / "fidelity-scatter.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    methods = [entry["method"] for entry in record["eval"]["table"]]
    for method in (
        "none",
        "kd",
        "fd-kl",
        "fd-lm",
        "dynamic-fd",
        "paragon",
        "elodi K=all",
        "elodi K=3",
        "legacy",
        "bcwi",
    ):
        assert any(method in m for m in methods), method
        assert any(method in line for line in text.splitlines() if line.startswith("|")), method
    assert "1/20" in stdout and "20/20" in stdout  # progress lines


@pytest.mark.bench
def test_the_gpu_mode_runs_without_ray_mlflow_or_pydantic(tmp_path):
    """`--gpu` runs every job in one process (a bare GPU machine has no Ray, MLflow or pydantic);
    its code path, on the CPU at toy scale (mode gpu-check): replicas packed, gap closed reported."""
    out = tmp_path / "docs" / "benchmarks" / "fidelity.md"
    probe = (
        "import sys\nfrom benchmarks.fidelity.cli import main\n"
        f"main(['--mode', 'gpu-check', '--out', {str(out)!r}, '--work', {str(tmp_path / 'work')!r}])\n"
        "print('loaded', sorted(m for m in ('ray', 'mlflow', 'pydantic') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "loaded []" in done.stdout
    record = json.loads((tmp_path / "work" / "gpu-check" / "results.json").read_text())
    elodi = next(e for e in record["eval"]["table"] if e["method"].startswith("elodi K=all"))
    assert elodi["gap_closed"] is not None and any("gap" in c["target"] for c in record["eval"]["verdicts"])
    replicas = [json.loads(p.read_text()) for p in (tmp_path / "work" / "gpu-check").glob("s0_old_replica-*.json")]
    assert replicas and all(r.get("packed") == 2 for r in replicas)  # m = 2 replicas of a version, one model
    text = out.read_text()
    assert "## Fidelity at GPU scale" in text and "gap closed %" in text


@pytest.mark.bench
def test_quick_values_are_consistent(quick_run, fashion_mnist):
    _, record, _ = quick_run
    for split in ("eval", "val"):
        for entry in record[split]["table"]:
            for report in entry["per_seed"]:
                assert report["n"] == (1000 if split == "eval" else len(fashion_mnist.val))
                for metric in ("er_old", "er_new", "nfr", "pfr"):
                    assert 0.0 <= report[metric] <= 1.0
                # every sample is counted once: ER_new = ER_old + NFR − PFR
                assert report["er_new"] == pytest.approx(report["er_old"] + report["nfr"] - report["pfr"])
    none = record["eval"]["table"][0]
    assert none["method"] == "none" and none["nfr"][0] > 0
    assert {check["met"] for check in record["eval"]["verdicts"]} <= {True, False}
    for chain in record["eval"]["chain"].values():
        assert np.diag(chain["nfr_mean"]).tolist() == [0.0, 0.0, 0.0]
    assert [entry["m"] for entry in record["eval"]["curve"]] == [1, 2]
    assert 0.0 <= next(iter(record["bcwi_alpha"].values())) <= 1.0


def test_plan_shares_models_between_methods(tmp_path):
    layout = trainings.layout(MODES["default"], 2, tmp_path)
    rows = {row.method: row for row in layout.rows[0]}
    assert rows["none"].old == rows["kd"].old == rows["bcwi"].old == ("s0/old/replica-1",)
    assert rows["paragon (4×, both ends)"].new == tuple(f"s0/new/replica-{i}" for i in range(1, 5))
    assert rows["elodi K=all (both ends)"].old == ("s0/old/elodi-k10-m4",)
    assert layout.plan.jobs["s0/new/elodi-k10-m4"].references == (("teacher", rows["paragon (4×, both ends)"].new),)
    curve_elodi, table_elodi = layout.curves[0][4]["elodi"], rows["elodi K=all (both ends)"]
    assert (curve_elodi.old, curve_elodi.new) == (table_elodi.old, table_elodi.new)
    # 8 replicas per version for the curve, each trained once
    assert sum(name.startswith("s0/new/replica-") for name in layout.plan.jobs) == 8
    stems = [job.stem for job in layout.plan.jobs.values()]
    assert len(set(stems)) == len(stems)
    # a changed setting changes the stem of the job and of everything downstream
    other = trainings.layout(MODES["default"].__class__(**{**MODES["default"].__dict__, "lr": 0.01}), 2, tmp_path)
    assert other.plan.jobs["s0/new/kd"].stem != layout.plan.jobs["s0/new/kd"].stem


def test_distinct_seeds_per_version_and_replica():
    seeds = {trainings.seed_of(s, v, i) for s in range(3) for v in trainings.VERSIONS for i in (1, 2, 8, 500)}
    assert len(seeds) == 3 * 3 * 4


def test_ensemble_is_the_mean_of_logits():
    logits = {"a": np.array([[1.0, 3.0]]), "b": np.array([[3.0, 0.0]])}
    np.testing.assert_allclose(ensemble(logits, ("a", "b")), [[2.0, 1.5]])


def test_mean_std_by_hand():
    assert mean_std([0.01, 0.03]) == pytest.approx((0.02, 0.014142135623730951))
    assert mean_std([0.05]) == (0.05, 0.0)
    summary = summarise(
        [
            {"er_old": 0.1, "er_new": 0.2, "nfr": 0.02, "rel_nfr": None, "pfr": 0.0},
            {"er_old": 0.3, "er_new": 0.2, "nfr": 0.04, "rel_nfr": 0.5, "pfr": 0.0},
        ]
    )
    assert summary["rel_nfr"] is None and summary["er_old"] == pytest.approx((0.2, 0.1414213562))


def test_disagreement_by_hand():
    a = np.array([[1.0, 0.0], [0.0, 1.0], [2.0, 1.0], [0.0, 3.0]])  # ids 0 1 0 1
    b = np.array([[1.0, 2.0], [0.0, 1.0], [2.0, 1.0], [5.0, 3.0]])  # ids 1 1 0 0
    assert disagreement(a, b) == pytest.approx(0.5)


def test_variant_mode_changes_one_setting():
    mode = MODES["default"]
    assert variant_mode(mode, {"alpha": 1.0}).alpha == 1.0
    assert variant_mode(mode, {"elodi_epochs": "2x"}).elodi_epochs == 2 * mode.epochs
    assert variant_mode(mode, {"k": 3}) == mode  # K is passed to the planner, not the mode
    assert variant_mode(MODES["hf-minilm"], {"alpha": 1.0, "elodi_epochs": "4x"}).elodi_epochs == 24


def test_elodi_students_distil_on_the_texts_after_their_slice_without_labels(tmp_path):
    """elodi_inputs 2: the ELODI students' data names a CSV of the first 2n training texts (n: their
    version's slice), of which the loader keeps those outside the slice, unlabelled; replicas keep n."""
    from dataclasses import replace

    from benchmarks.fidelity import trainings
    from workers.data.text import UNLABELLED
    from workers.tasks.resolve import cached_splits, training_split

    plan = trainings.Planner(replace(MODES["text-check"], elodi_inputs=2), tmp_path)
    student = plan.jobs[trainings.elodi(plan, 0, "old", 2, 3)].job
    replica = plan.jobs[trainings.plain(plan, 0, "old")].job
    assert replica.data.unlabelled is None and student.data.unlabelled == str(tmp_path / "unlabelled-first-1200.csv")
    labelled = cached_splits(replica.data).train
    split = training_split(student)
    assert len(labelled) == 600 and 1150 <= len(split) <= 1200  # copies of one text count once
    assert split.texts[:600] == labelled.texts and set(split.labels[600:].tolist()) == {UNLABELLED}
    without = trainings.Planner(MODES["text-check"], tmp_path)  # the replicas' cache is the plain mode's
    assert without.jobs[trainings.plain(without, 0, "old")].job.checkpoint_uri == replica.checkpoint_uri


def test_findings_from_the_means():
    def variant(nfr, er, paragon):
        return {
            "nfr": (nfr, 0.0),
            "nfr_vs_none": (nfr / 0.02, 0.0),
            "nfr_vs_paragon": (nfr / paragon, 0.0),
            "er_new": (er, 0.0),
            "none_er_new": (0.10, 0.0),
        }

    text = findings({"a": variant(0.018, 0.11, 0.015), "b": variant(0.011, 0.102, 0.010)})
    assert text.startswith("Lowest NFR: b (1.10 %, 0.55 × none, ER +0.20 pt vs none)")
    assert "≤ 0.6 × none: b;" in text and "≤ 1.15 × paragon: b;" in text and "ER ≤ none + 0.3 pt: b." in text


def test_invocations_log_keeps_the_run_that_trained(tmp_path):
    (tmp_path / "results.json").write_text(json.dumps({"date": "d0", "wall_s": 1734.0, "trained": 86, "jobs": 86}))
    runs = invocations(tmp_path, {"date": "d1", "wall_s": 42.0, "trained": 0, "jobs": 86})
    assert [run["date"] for run in runs] == ["d0", "d1"]
    assert invocations(tmp_path, {"date": "d2", "wall_s": 40.0, "trained": 0, "jobs": 86})[-1]["date"] == "d2"
    assert invocation_lines(runs) == (
        "wall time 28.9 min (86 of 86 models trained); then wall time 0.7 min "
        "(0 of 86 models trained, the rest from the cache)"
    )


def test_invocation_lines_skip_earlier_cache_only_runs():
    runs = [
        {"wall_s": 60.0, "trained": 3, "jobs": 9},
        {"wall_s": 6.0, "trained": 0, "jobs": 9},
        {"wall_s": 12.0, "trained": 0, "jobs": 9},
    ]
    assert invocation_lines(runs) == (
        "wall time 1.0 min (3 of 9 models trained, the rest from the cache); then wall "
        "time 0.2 min (0 of 9 models trained, the rest from the cache)"
    )


def test_prune_keeps_the_rows_and_seeds_whose_models_were_trained(tmp_path):
    """A run stopped by its deadline: rows with an untrained model go, and seeds without their
    no-treatment and paragon models go; with none of those left there is no table."""
    mode = MODES["gpu-check"]
    layout = trainings.layout(mode, 2, tmp_path, num_classes=10)
    everything = set(layout.plan.jobs)
    seed0 = {name for name in everything if name.startswith("s0/")}
    no_kd = seed0 - {"s0/new/kd"}
    pruned = trainings.prune(layout, no_kd)
    assert sorted(pruned.rows) == [0]  # seed 1 has no trained models
    methods = [row.method for row in pruned.rows[0]]
    assert "kd" not in methods and "none" in methods and any(m.startswith("elodi") for m in methods)
    assert sorted(pruned.curves) == [0]
    full = trainings.prune(layout, everything)
    assert sorted(full.rows) == [0, 1] and len(full.rows[0]) == len(layout.rows[0])
    with pytest.raises(ValueError, match="no treatment and the paragon"):
        trainings.prune(layout, {"s0/old/replica-1"})


def test_seeds_run_apart_plan_the_same_models(tmp_path):
    """`--first-seed`: seed 1 planned alone has the names, seeds and stems it has in a 2-seed plan."""
    mode = MODES["gpu-check"]
    both = trainings.layout(mode, 2, tmp_path).plan.jobs
    alone = trainings.layout(mode, 1, tmp_path, first_seed=1).plan.jobs
    assert set(alone) == {name for name in both if name.startswith("s1/")}
    assert all(alone[name].stem == both[name].stem for name in alone)


def _record(method_nfrs: dict[str, float], curve_nfr: float) -> dict:
    def report(nfr):
        return {"n": 100, "er_old": 0.1, "er_new": 0.1, "nfr": nfr, "rel_nfr": nfr / 0.09, "pfr": nfr}

    table = [{"method": method, "per_seed": [report(nfr)]} for method, nfr in method_nfrs.items()]
    one = {metric: [value, 0.0] for metric, value in report(curve_nfr).items() if metric != "n"}
    return {"table": table, "curve": [{"m": 4, "paragon": one, "elodi": one}]}


def test_merge_puts_seeds_of_separate_runs_in_one_table():
    """Two one-seed runs: means and ddof-1 stds over both, gap closed per seed against its own none
    and paragon ((4−3)/(4−2) = 0.5 and (6−3)/(6−3) = 1.0), a method missing from one run left out."""
    from benchmarks.fidelity.results import merge

    first = _record({"none": 0.04, "paragon (4×)": 0.02, "elodi K=all": 0.03, "kd": 0.035}, 0.02)
    second = _record({"none": 0.06, "paragon (4×)": 0.03, "elodi K=all": 0.03}, 0.04)
    merged = merge([first, second])
    rows = {entry["method"]: entry for entry in merged["table"]}
    assert list(rows) == ["none", "paragon (4×)", "elodi K=all"]
    assert rows["none"]["nfr"] == pytest.approx((0.05, 0.0141421356))
    assert rows["elodi K=all"]["gap_closed"] == pytest.approx((0.75, 0.3535533906))
    assert merged["curve"][0]["elodi"]["nfr"] == pytest.approx((0.03, 0.0141421356))
    assert any(check["row"] == "elodi K=all" for check in merged["verdicts"])


def test_the_text_plan_gives_each_version_its_architecture_and_tokenizer(tmp_path):
    """--text: old replicas are text-bags on half the tweets (their own tokenizer, lr, epochs), new ones
    text-cnns on all; BCWI fine-tunes the old architecture with the old tokenizer on all data."""
    mode = MODES["text"]
    jobs = trainings.layout(mode, 1, tmp_path, num_classes=3).plan.jobs
    old, new, tuned = (jobs[n].job for n in ("s0/old/replica-1", "s0/new/replica-1", "s0/new/bcwi-finetune"))
    assert (old.arch, new.arch, tuned.arch) == ("text-bag", "text-cnn", "text-bag")
    assert old.data.train_limit == 13640 and new.data.train_limit is None and tuned.data == new.data
    assert old.inputs is not None and new.inputs is not None and old.inputs.tokenizer != new.inputs.tokenizer
    assert tuned.inputs == old.inputs and tuned.init_from == jobs["s0/old/replica-1"].stem + ".pt"
    assert (old.config.lr, old.config.epochs, new.config.lr, new.config.epochs) == (2.0, 5, mode.lr, mode.epochs)
    assert old.config.weight_decay == new.config.weight_decay == 0.0
    assert "s0/new/dynamic-fd" not in jobs and "s0/new/fd-lm" in jobs  # the methods
    assert jobs["s0/new/elodi-k3-m4"].references == (("teacher", tuple(f"s0/new/replica-{i}" for i in range(1, 5))),)


@pytest.mark.bench
def test_the_text_check_mode_end_to_end(tmp_path):
    """The text modes' code path (text-check: a few hundred tweets) in this process: every row, the
    text section, each model's logits read through its own tokenizer."""
    out = tmp_path / "docs" / "benchmarks" / "fidelity.md"
    command = [sys.executable, "-m", "benchmarks.fidelity", "--mode", "text-check", "--local"]
    done = subprocess.run(
        [*command, "--out", str(out), "--work", str(tmp_path / "work")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # a process of its own, as the gpu-check test: nothing it sets stays in the test session
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((tmp_path / "work" / "text-check" / "results.json").read_text())
    methods = [entry["method"] for entry in record["eval"]["table"]]
    assert methods[0] == "none" and "bcwi" in methods and any("legacy" in m for m in methods)
    assert all(report["n"] == 500 for entry in record["eval"]["table"] for report in entry["per_seed"])
    text = out.read_text()
    assert "## Fidelity on text: text-bag → text-cnn on tweet sentiment" in text and "text-bag` fine-tuned" in text
    baseline = record["baseline"]  # the TF-IDF model on the very same splits, its NFR in the section
    assert (baseline["train_samples"], baseline["old_train_samples"], baseline["eval_samples"]) == (1200, 600, 500)
    assert f"NFR **{100 * baseline['eval_nfr']:.2f} %**" in text
    assert (out.parent.parent / "results" / "fidelity-text-check-scatter.png").exists()


def test_the_fine_tuning_plan_starts_every_new_model_from_the_plain_old_one(tmp_path):
    """fine-tuning: the same rows twice; in the second every new model (plain, replicas, students)
    starts from that seed's plain old model, and only BCWI (which fine-tunes either way) is shared."""
    layout = trainings.layout(MODES["fine-tuning"], 2, tmp_path)
    jobs = layout.plan.jobs
    for seed in (0, 1):
        scratch, tuned = layout.rows[seed], layout.from_old[seed]
        assert [r.method for r in scratch] == [r.method for r in tuned]
        assert not any("elodi" in r.method and "plain old" not in r.method for r in scratch)  # no both-ends rows
        plain_old = f"s{seed}/old/replica-1"
        for before, after in zip(scratch, tuned):
            assert before.old == after.old  # the old side is the deployed model either way
            assert set(after.new).isdisjoint(before.new) == (before.method != "bcwi")
            new = [name for name in after.new if not name.endswith("/bcwi")]
            for name in new:
                assert jobs[name].init_from == plain_old and jobs[name].job.init_from == jobs[plain_old].stem + ".pt"
            assert all(jobs[name].init_from is None for name in before.new if "bcwi" not in name)
        teachers = dict(jobs[f"s{seed}/new-from-old/elodi-k10-m4"].references)["teacher"]
        assert all(jobs[name].init_from == plain_old for name in teachers)
    assert not any(name.startswith(("s0/v1", "s1/v1")) for name in jobs)  # no chain


def test_text_models_started_from_the_old_weights_read_the_old_tokenizer(tmp_path):
    mode = MODES["fine-tuning-text"]
    jobs = trainings.layout(mode, 1, tmp_path, num_classes=3).plan.jobs
    old, scratch, tuned = (jobs[n].job for n in ("s0/old/replica-1", "s0/new/replica-1", "s0/new-from-old/kd"))
    assert old.arch == scratch.arch == tuned.arch == "text-bag"
    assert tuned.inputs == old.inputs != scratch.inputs
    assert (tuned.data, tuned.config.lr, tuned.config.epochs) == (scratch.data, mode.lr, mode.epochs)


@pytest.mark.bench
def test_the_fine_tuning_check_mode_end_to_end(tmp_path):
    """The fine-tuning section: both tables from real trainings, the paired table, the scatter."""
    out = tmp_path / "docs" / "benchmarks" / "fidelity.md"
    command = [sys.executable, "-m", "benchmarks.fidelity", "--mode", "fine-tuning-check", "--local"]
    done = subprocess.run(
        [*command, "--out", str(out), "--work", str(tmp_path / "work")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((tmp_path / "work" / "fine-tuning-check" / "results.json").read_text())
    scratch, tuned = record["eval"]["table"], record["eval"]["from_old"]
    assert [e["method"] for e in scratch] == [e["method"] for e in tuned]
    assert scratch[0]["nfr"] != tuned[0]["nfr"] and scratch[-1]["nfr"] == tuned[-1]["nfr"]  # none differs, BCWI is one
    assert "from_old" in record["val"] and record["eval"]["from_old_verdicts"]
    text = out.read_text()
    assert "## Fidelity, fine-tuning from the deployed weights: Fashion-MNIST, mlp-small" in text
    assert "| method | ER_new % scratch | NFR % scratch | ER_new % from old |" in text
    assert (out.parent.parent / "results" / "fidelity-fine-tuning-check-scatter.png").read_bytes()[:4] == b"\x89PNG"


def test_a_changed_bcwi_tolerance_is_a_new_bcwi_result_and_reuses_every_trained_model(tmp_path):
    mode = MODES["text-linear"]
    before = trainings.layout(mode, 1, tmp_path, num_classes=3).plan.jobs
    after = trainings.layout(dataclasses.replace(mode, bcwi_tolerance=0.0), 1, tmp_path, num_classes=3).plan.jobs
    assert before["s0/new/bcwi"].stem != after["s0/new/bcwi"].stem
    assert all(before[name].stem == after[name].stem for name in before if name != "s0/new/bcwi")
