"""The fidelity benchmark's pretrained-encoder modes (hf-minilm…): their plan, and the check mode end to end."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks.fidelity import trainings
from benchmarks.fidelity.modes import MODES

ROOT = Path(__file__).resolve().parents[1]


def test_the_hf_plan_fine_tunes_the_pretrained_encoder_with_its_recipe_on_a_text_table(tmp_path):
    """hf-minilm-r8: every model is MiniLM on Reuters R8 (the table `make` installs, by its id column),
    reading the directory's tokenizer with its specials cut at 128 tokens; old on the first 500
    stories, new on 1,000; each trains with the hf: recipe (AdamW, linear decay after a warm-up,
    no decay on biases and norms, clip 1), ELODI students and BCWI's fine-tuning included."""
    from pipelines.defaults import HF
    from workers.data.text_tables import REUTERS_R8_CSV
    from workers.models.hf import MINILM_DIR

    mode = MODES["hf-minilm-r8"]
    jobs = trainings.layout(mode, 1, tmp_path, num_classes=8).plan.jobs
    old, new, student, tuned = (
        jobs[n].job for n in ("s0/old/replica-1", "s0/new/replica-1", "s0/new/elodi-k8-m4", "s0/new/bcwi-finetune")
    )
    assert {job.arch for job in (old, new, student, tuned)} == {f"hf:{MINILM_DIR}"}
    assert old.data.source == new.data.source == str(REUTERS_R8_CSV) and new.data.id_column == "id"
    assert (old.data.train_limit, new.data.train_limit, new.data.eval_limit) == (500, 1000, None)
    assert new.inputs is not None and new.inputs.add_special_tokens and new.inputs.max_length == 128
    for job in (old, new, student, tuned):
        config = job.config
        assert (config.optimizer, config.lr, config.schedule, config.weight_decay_on) == (
            "adamw",
            HF.lr,
            "linear",
            "weights",
        )
        assert (config.warmup_epochs, config.max_grad_norm, config.batch_size) == (HF.warmup_epochs, 1.0, 32)
    assert "s0/new/elodi-k3-m4" not in jobs  # K = all classes only
    assert {"s0/new/kd", "s0/new/fd-kl", "s0/new/fd-lm"} <= set(jobs) and "s0/new/dynamic-fd" not in jobs


def run_check_mode(mode: str, tmp_path: Path) -> tuple[Path, dict]:
    """`python -m benchmarks.fidelity --mode MODE --local` in a process of its own (nothing it sets stays
    in the test session): the section's file and the results record."""
    out = tmp_path / "docs" / "benchmarks" / "fidelity.md"
    command = [sys.executable, "-m", "benchmarks.fidelity", "--mode", mode, "--local"]
    done = subprocess.run(
        [*command, "--out", str(out), "--work", str(tmp_path / "work")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return out, json.loads((tmp_path / "work" / mode / "results.json").read_text())


def test_the_adapter_plan_trains_adapters_but_the_full_fine_tuning_row(tmp_path):
    """hf-minilm-lora: every model (replicas, ELODI students, BCWI's fine-tune) is a LoRA adapter at the
    adapter rate; the "none, full fine-tuning" row's two models have no adapter, the full rate, and
    the plain models' seeds and data."""
    mode = MODES["hf-minilm-lora"]
    layout = trainings.layout(mode, 1, tmp_path, num_classes=3)
    jobs = layout.plan.jobs
    full = {name for name in jobs if name.endswith("/full-fine-tuning")}
    assert full == {"s0/old/full-fine-tuning", "s0/new/full-fine-tuning"}
    for name in full:
        job, plain = jobs[name].job, jobs[name.replace("full-fine-tuning", "replica-1")].job
        assert job.config.adapter is None and job.config.lr == mode.full_lr == 2e-4
        assert (job.config.seed, job.data, job.inputs) == (plain.config.seed, plain.data, plain.inputs)
        assert jobs[name].stem != jobs[name.replace("full-fine-tuning", "replica-1")].stem
    lora = [jobs[name].job for name in jobs if name not in full and jobs[name].kind == "train"]
    # 4 old and 4 new replicas, 2 ELODI students, BCWI's fine-tune
    assert len(lora) == 11 and all(j.config.adapter == mode.adapter and j.config.lr == 2e-3 for j in lora)
    methods = [row.method for row in layout.rows[0]]
    assert methods[:2] == ["none", "none, full fine-tuning"] and "bcwi" in methods
    assert not any("both ends" in m and "elodi" in m for m in methods)  # the old side is the plain adapter


@pytest.mark.bench
def test_the_adapter_check_mode_end_to_end(tmp_path):
    """The hf: modes' code path, the pretrained MiniLM's (hf-minilm-lora-check: 200 → 400 tweets,
    1 epoch) in its own process: every row trains, full fine-tuning's too; LoRA teachers serve the
    ELODI students, BCWI interpolates adapters; the section is named after the set, says what was an
    adapter and gives the TF-IDF line on the same splits."""
    out, record = run_check_mode("hf-minilm-lora-check", tmp_path)
    methods = [entry["method"] for entry in record["eval"]["table"]]
    assert methods[:2] == ["none", "none, full fine-tuning"] and "bcwi" in methods and len(methods) == 6
    assert any(m.startswith("paragon") for m in methods) and any("elodi" in m.lower() for m in methods)
    assert all(report["n"] == 200 for entry in record["eval"]["table"] for report in entry["per_seed"])
    text = out.read_text()
    assert "## Fidelity on text: tweets, hf:all-MiniLM-L6-v2, LoRA adapters against full fine-tuning" in text
    assert "LoRA adapter (rank 8, alpha 16, on query, value" in text and "lr 0.0002, the rest" in text
    baseline = record["baseline"]
    assert (baseline["dataset"], baseline["train_samples"], baseline["old_train_samples"]) == ("tweets", 400, 200)
    assert f"NFR **{100 * baseline['eval_nfr']:.2f} %**" in text


def test_the_adapter_cost_table_puts_each_way_beside_its_plain_update_flips():
    """adapter_cost's report: full fine-tuning's row takes its cost and adapter_flips' "full fine-tuning"
    scores; each LoRA rate's row the LoRA cost and that rate's scores, each mean ± std in %."""
    from benchmarks.quality.adapter_cost import report

    cost = {"samples_per_s": 20.0, "peak_rss_mib": 2000.0, "parameters": 100, "trainable": 100}
    cost |= {"optimizer_state_mib": 1.0, "own_weights_mib": 1.0, "checkpoint_mib": 1.0}
    results = {
        "args": {"steps": 30, "batch": 32, "tokens": 64, "threads": 1},
        "date": "2026-12-01",
        "machine": "x86_64, 1 thread(s)",
        "torch": "2",
        "modes": [cost | {"mode": "full"}, cost | {"mode": "lora", "samples_per_s": 25.0, "trainable": 1}],
    }
    scores = lambda er: {  # noqa: E731
        "er_old": [er + 0.03, 0.0],
        "er_new": [er, 0.001],
        "nfr": [er / 4, 0.002],
        "val_er_new": [er - 0.01, 0.0],
    }
    flips = {
        "command": "python -m benchmarks.quality.adapter_flips --seeds 3 --rates 0.0005 0.002",
        "date": "2026-12-01",
        "seeds": 3,
        "n_eval": 2000,
        "rates": [5e-4, 2e-3],
        "mode": {"train_sizes": [500, 500, 1000], "epochs": 6, "max_length": 128, "full_lr": 2e-4},
        "ways": {"full fine-tuning": scores(0.28), "LoRA lr 0.0005": scores(0.3), "LoRA lr 0.002": scores(0.32)},
    }
    text = report(results, flips)
    lines = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if line.startswith("| ")}
    assert lines["full fine-tuning"].startswith("| full fine-tuning | 20.0 |")
    assert lines["full fine-tuning"].endswith("| 31.00 ± 0.00 | 28.00 ± 0.10 | 7.00 ± 0.20 |")
    assert lines["LoRA r8 α16 query,value, lr 0.0005"].startswith("| LoRA r8 α16 query,value, lr 0.0005 | 25.0 |")
    assert lines["LoRA r8 α16 query,value, lr 0.0005"].endswith("| 33.00 ± 0.00 | 30.00 ± 0.10 | 7.50 ± 0.20 |")
    assert lines["LoRA r8 α16 query,value, lr 0.002"].endswith("| 35.00 ± 0.00 | 32.00 ± 0.10 | 8.00 ± 0.20 |")
    assert "NFR old → new %" in lines["mode"] and "3 seeds" in text
    assert "at lr 0.0005 ER_new +2.00 pt and NFR +0.50 pt (val ER_new 29.00 %)" in text
    assert "at lr 0.002 ER_new +4.00 pt and NFR +1.00 pt" in text and "(val ER_new 27.00 %)" in text
    assert "NFR" not in report(results)  # no record: the cost columns alone


def test_adapter_flips_scores_a_seed_by_hand():
    """ER_old, ER_new and NFR on eval, ER_old and ER_new on val, from one-hot logits."""
    from benchmarks.quality.adapter_flips import scores

    onehot = lambda ids: np.eye(3, dtype=np.float32)[ids]  # noqa: E731
    labels = {"eval": np.array([0, 1, 2, 0]), "val": np.array([1, 1])}
    old = {"eval": onehot([0, 1, 0, 1]), "val": onehot([2, 1])}  # right on 0, 1; on val right on 1
    new = {"eval": onehot([0, 2, 2, 0]), "val": onehot([1, 1])}  # right on 0, 2, 3: sample 1 flips
    expected = {"er_old": 0.5, "er_new": 0.25, "nfr": 0.25, "val_er_old": 0.5, "val_er_new": 0.0}
    assert scores(old, new, labels) == expected


def test_adapter_flips_plans_each_lora_rate_apart_and_reuses_the_modes_plain_models(tmp_path):
    """The adapter rate's ways are the mode's own plain models; another rate gets models of its own,
    with the same seed and data and that rate."""
    from benchmarks.quality.adapter_flips import lora_plain

    mode = MODES["hf-minilm-lora"]
    plan = trainings.Planner(mode, tmp_path)
    assert lora_plain(plan, mode.lr, 0, "new") == "s0/new/replica-1"
    other = plan.jobs[lora_plain(plan, 5e-4, 0, "new")]
    own = plan.jobs["s0/new/replica-1"]
    assert other.name == "s0/new/replica-1-lr0.0005" and other.stem != own.stem
    assert (other.job.config.lr, own.job.config.lr) == (5e-4, 2e-3)
    assert other.job.config.seed == own.job.config.seed and other.job.data == own.job.data
    assert other.job.config.adapter == own.job.config.adapter is not None


def test_the_hf_setting_says_what_elodi_students_read_beyond_their_labelled_slice():
    """hf-minilm: ELODI at α 1 on 4× the slice's texts, said in the section's setting; the LoRA, R8 and GPU modes'
    students read their labelled slice only (α 0.8), and their settings say nothing of unlabelled texts."""
    import dataclasses

    from benchmarks.fidelity.report import _fine_tuning_setting

    def setting(name: str) -> str:
        return _fine_tuning_setting({"mode": dataclasses.asdict(MODES[name]), "n_eval": 2000, "n_val": 615}, "3 seeds")

    text = setting("hf-minilm")
    assert "ELODI (α = 1.0, LDI with p = 2 over all classes; each ELODI student reads 4× its version's slice" in text
    assert "the next 3× of the training split's texts with their labels dropped (`data.unlabelled`" in text
    for other in map(setting, ("hf-minilm-lora", "hf-minilm-r8", "hf-minilm-gpu")):
        assert "ELODI (α = 0.8, LDI with p = 2 over all classes)" in other and "unlabelled" not in other
