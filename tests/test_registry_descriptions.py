"""The registry tells the chain by itself: the Markdown MLflow shows as the registered model's and
each version's description, by hand, then written by a real registration and read back from the
MLflow UI's model page as headless chromium renders it."""

import shutil
import subprocess

import mlflow
import numpy as np
from mlflow import MlflowClient

from orchestrator.tracking import promotion, registry
from orchestrator.tracking.descriptions import model_description, version_description, version_sentence
from orchestrator.tracking.ledger import write_ledger
from orchestrator.tracking.version_record import VersionRecord
from services import pointed_at
from workers.models.checkpoints import ModelSettings, save_checkpoint


def _row(version, label, method, er, parent=None, nfr=None, pfr=None, aliases=()):
    return VersionRecord(
        version=version,
        label=label,
        method=method,
        arch="mlp-small" if version == "1" else "mlp",
        parent_version=parent,
        error_rate=er,
        nfr=nfr,
        pfr=pfr,
        fingerprint="abc",
        aliases=tuple(aliases),
        created="2025-01-01T00:00:00",
    )


CHAIN = [
    _row("1", "v1", "none", 0.1523, aliases=["champion"]),
    _row("2", "v2-none", "none", 0.1041, "1", 0.0197, 0.0671),
    _row("3", "v2-elodi", "elodi", 0.1042, "1", 0.0149, 0.0630, aliases=["challenger"]),
]


def test_a_version_sentence_says_how_many_samples_its_flips_count():
    from dataclasses import replace

    grown = replace(CHAIN[1], n_compared=12000)
    assert version_sentence(grown, [CHAIN[0], grown], "no treatment") == (
        "v2-none: no treatment from v1; NFR 1.97% against v1 on 12,000 eval samples; ER 10.41%"
    )


def test_version_sentences_by_hand():
    assert version_sentence(CHAIN[0], CHAIN, "no treatment") == (
        "v1: no treatment, the first version of the chain; ER 15.23%"
    )
    assert version_sentence(CHAIN[1], CHAIN, "no treatment") == (
        "v2-none: no treatment from v1; NFR 1.97% against v1; ER 10.41%"
    )
    assert version_sentence(CHAIN[2], CHAIN, "ELODI (m 4)") == (
        "v2-elodi: ELODI (m 4) from v1; NFR 1.49% against v1, no treatment 1.97%; ER 10.42%"
    )
    more = [*CHAIN, _row("4", "v2-none-b", "none", 0.1050, "1", 0.0207, 0.0600)]
    assert version_sentence(more[2], more, "ELODI (m 4)") == (
        "v2-elodi: ELODI (m 4) from v1; NFR 1.49% against v1, no treatment 2.02% ± 0.07% (over 2); ER 10.42%"
    )
    assert version_description("demo", CHAIN[2], CHAIN, "ELODI (m 4)", "[its run](#/x)") == (
        "v2-elodi: ELODI (m 4) from v1; NFR 1.49% against v1, no treatment 1.97%; ER 10.42%.\n\n"
        "NFR matrix of the chain at this registration: `nfr_matrix.png` and `nfr_matrix.json` in "
        "[its run](#/x); flip report: `congruent report demo --version 3` writes it and logs it to "
        "that run as `report/report.html`."
    )


def test_model_description_by_hand():
    assert model_description("demo", CHAIN, 10) == (
        "**demo** is a 10-class classifier (latest architecture: mlp) updated with Congruent: each "
        "version is measured by the flips it causes against its parent. NFR (negative flips) counts the "
        "evaluation samples the parent got right and the version gets wrong; PFR (positive flips) the "
        "reverse; ER is the error rate.\n"
        "\n"
        "The chain so far: 3 versions; champion: version 1 (v1).\n"
        "\n"
        "| version | label | method | arch | parent | ER | NFR vs parent | PFR vs parent |\n"
        "|---|---|---|---|---|---|---|---|\n"
        "| **1 ★ champion** | v1 | no treatment | mlp-small | — | 15.23% | — | — |\n"
        "| 2 | v2-none | no treatment | mlp | v1 | 10.41% | 1.97% | 6.71% |\n"
        "| 3 (challenger) | v2-elodi | ELODI | mlp | v1 | 10.42% | 1.49% | 6.30% |\n"
        "\n"
        "Written by Congruent at each registration and promotion; `congruent versions demo`."
    )
    assert "champion: none yet." in model_description("demo", [_row("1", "v1", "none", 0.2)])


def _register(tmp_path, model, label, method, parent, class_ids, labels, params):
    """One registration as a pipeline makes it: a run with its params and ledger, then `register`."""
    settings = ModelSettings("mlp-small", 10)
    checkpoint = save_checkpoint(tmp_path / label / "model.pt", settings.build(seed=len(label)), settings)
    logits = np.eye(10, dtype=np.float32)[class_ids]
    with mlflow.start_run(run_name=label):
        mlflow.log_params(params)
        ledger = write_ledger(tmp_path / label / "predictions.parquet", logits, labels, np.arange(len(labels)), "fp")
        mlflow.log_artifact(str(ledger), "ledger")
        record = VersionRecord(
            method=method,
            arch="mlp-small",
            label=label,
            fingerprint="fp",
            spec_hash=label,
            error_rate=float(np.mean(class_ids != labels)),
            **({} if parent is None else {"parent_version": parent[0], "nfr": parent[1], "pfr": parent[2]}),
        )
        return registry.register(model, str(checkpoint), record)


def test_registration_writes_the_chain_the_mlflow_ui_shows(tmp_path, monkeypatch, mlflow_stack):
    """On the shared MLflow server, a model of this test's own."""
    with pointed_at(mlflow_stack.tracking_uri, monkeypatch):
        model = f"described-{tmp_path.name}"[-60:]
        mlflow.set_experiment(model)
        labels = np.arange(200) % 10
        v1 = labels.copy()
        v1[:40] = (labels[:40] + 1) % 10  # 20 % errors
        plain, elodi = v1.copy(), v1.copy()
        plain[:30], plain[100:106] = labels[:30], (labels[100:106] + 1) % 10  # NFR 3 %, ER 8 %
        elodi[:28], elodi[100:102] = labels[:28], (labels[100:102] + 1) % 10  # NFR 1 %, PFR 14 %, ER 7 %
        _register(tmp_path, model, "v1", "none", None, v1, labels, {"method.name": "none"})
        promotion.set_champion(model, "1")
        _register(tmp_path, model, "v2-none", "none", ("1", 0.03, 0.15), plain, labels, {"method.name": "none"})
        params = {"method.name": "elodi", "method.m": "4"}
        _register(tmp_path, model, "v2-elodi", "elodi", ("1", 0.01, 0.14), elodi, labels, params)

        client = MlflowClient()
        described = client.get_registered_model(model).description
        assert "| **1 ★ champion** | v1 | no treatment |" in described
        assert "| 3 (challenger) | v2-elodi | ELODI | mlp-small | v1 | 7.00% | 1.00% | 14.00% |" in described
        assert client.get_model_version(model, "3").description.startswith(
            "v2-elodi: ELODI (m 4) from v1; NFR 1.00% against v1, no treatment 3.00%; ER 7.00%."
        )

        chromium = shutil.which("chromium") or shutil.which("chromium-browser")
        assert chromium, "Debian's chromium is installed by `make test` (Makefile: system-services)"
        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=20000", "--dump-dom"]
        page = subprocess.run(
            [chromium, *flags, f"{mlflow_stack.tracking_uri}/#/models/{model}"],
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout
        text = " ".join(page.split())
        assert "The chain so far: 3 versions; champion: version 1 (v1)." in text, text[-3000:]
        assert "<table" in page and "v2-elodi" in text and "ELODI" in text  # the Markdown table, rendered
        assert "1 ★ champion" in text and "14.00%" in text


def test_an_auto_version_says_what_it_chose_beside_its_own_no_treatment():
    import dataclasses

    auto = dataclasses.replace(
        _row("2", "v2", "auto", 0.1371, "1", 0.0105, 0.03),
        chosen="kd",
        candidates=({"name": "none", "nfr": 0.029}, {"name": "kd", "nfr": 0.0105}),
    )
    sentence = version_sentence(auto, [CHAIN[0], auto], "auto")
    assert sentence == (
        "v2: auto (chose KD on the validation split) from v1; NFR 1.05% against v1, no treatment 2.90%; ER 13.71%"
    )
    assert VersionRecord.from_tags(auto.to_tags(), "2").candidates == auto.candidates  # through the registry's tags
