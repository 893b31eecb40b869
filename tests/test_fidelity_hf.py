"""The fidelity benchmark's pretrained-encoder modes (hf-minilm…): their plan, and the check mode end to end."""

import json
import os
import subprocess
import sys
from pathlib import Path

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


@pytest.mark.slow
def test_the_hf_check_mode_end_to_end(tmp_path):
    """The hf: modes' code path (hf-minilm-check: MiniLM on 300 → 600 Reuters stories) in a process of
    its own: every row, the section named after the set, and the TF-IDF line on the same splits."""
    out = tmp_path / "docs" / "benchmarks.md"
    command = [sys.executable, "-m", "benchmarks.fidelity", "--mode", "hf-minilm-check", "--local"]
    done = subprocess.run(
        [*command, "--out", str(out), "--work", str(tmp_path / "work")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((tmp_path / "work" / "hf-minilm-check" / "results.json").read_text())
    methods = [entry["method"] for entry in record["eval"]["table"]]
    assert methods[0] == "none" and "bcwi" in methods and any(m.startswith("paragon") for m in methods)
    assert all(report["n"] == 200 for entry in record["eval"]["table"] for report in entry["per_seed"])
    text = out.read_text()
    assert "## Fidelity on text: reuters-r8, hf:all-MiniLM-L6-v2, fine-tuned" in text
    baseline = record["baseline"]
    assert (baseline["dataset"], baseline["train_samples"], baseline["old_train_samples"]) == ("reuters-r8", 600, 300)
    assert f"NFR **{100 * baseline['eval_nfr']:.2f} %**" in text
