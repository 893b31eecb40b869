"""Every spec field and every field of the job records reaches the workers that read it: a value
other than the default changes what a worker receives (or reads), without running Ray."""

from pathlib import Path

import pytest

from orchestrator.planning.preflight import preflight
from pipelines.auto import AUTO_ONLY_FIELDS
from pipelines.spec import parse_spec
from test_plan import BASE, spec

# A value other than the default for every field of the spec's train, method and data sections,
# and the section it needs beside it. A field added to the spec needs a row here.
NON_DEFAULT = {
    "train": {
        "epochs": 3,
        "student_epochs": 6,
        "batch_size": 64,
        "optimizer": "adamw",
        "lr": 0.05,
        "momentum": 0.8,
        "weight_decay": 0.0,
        "weight_decay_on": "weights",
        "schedule": "step",
        "warmup_epochs": 0.5,
        "seed": 7,
        "augment": False,
        "crop": 3,
        "flip": False,
        "max_grad_norm": None,
        "prefetch": 3,
        "precision": "bf16",
        "compile": "reduce-overhead",
        "freeze": "backbone",
        "adapter": {"rank": 4},
        "distill_inputs": {"rate": 0.3},
    },
    "method": {
        "name": "kd",
        "m": 3,
        "alpha": 0.5,
        "k": 3,
        "topk_by": "union",
        "p": 1.0,
        "margin": 0.1,
        "ldi_reduction": "mean",
        "exclude_label": True,
        "legacy_weight": 0.3,
        "temperature": 2.0,
        "focal_alpha": 0.5,
        "focal_beta": 2.0,
        "distance": "kl",
        "bcwi_alphas": [0.0, 0.5],
        "bcwi_er_tolerance": 0.01,
        "proximal_weight": 0.5,
    },
    "data": {
        "path": "user/data",
        "subset": "half-classes",
        "train_limit": 100,
        "eval_limit": 50,
        "val_fraction": 0.2,
        "eval_fraction": 0.3,
        "num_classes": 12,
        "text_column": "body",
        "label_column": "y",
        "encoding": "latin-1",
        "id_column": "review_id",
        "image_size": 32,
        "streaming": True,
        "skip_corrupt": True,
        "modality": "image",
        "unlabelled": "more.csv",
    },
}
BESIDE = {("data", "num_classes"): {"path": "user/data"}, ("method", "name"): {"legacy_weight": None}}
BESIDE[("method", "proximal_weight")] = {"name": "proximal", "legacy_weight": None}  # proximal's own λ
# fields of other sections a field needs beside it: an adapter is for an hf:DIR model, which reads text
AROUND = {
    ("train", "adapter"): {"arch": "hf:/models/bert", "data": {"dataset": "tweet-sentiment"}},
    ("data", "unlabelled"): {"arch": "text-bag", "data": {"dataset": "tweet-sentiment"}},  # texts for a text model
    ("train", "distill_inputs"): {"arch": "text-bag", "data": {"dataset": "tweet-sentiment"}},  # token dropout: text
}
SAME_AS_DEFAULT = {("data", "dataset")}  # fashion-mnist is the source without it; tweet-sentiment needs a text arch
# method auto's own fields (only auto may set them): they reach its candidates and its choice, tested below
SAME_AS_DEFAULT |= {("method", name) for name in AUTO_ONLY_FIELDS}
# read by the driver when it writes the ledger, never by a worker: test_slice_gate.py checks each
# eval sample's ledger row holds its value
SAME_AS_DEFAULT |= {("data", "slice_columns"), ("data", "slices")}
# read by preflight (facts/protected_training.py: the model's protected set from the registry joins the
# data request), not by data_request: test_protect.py checks each sample is in train that many times
SAME_AS_DEFAULT |= {("train", "protected_weight")}


def consumers(document: dict) -> tuple:
    """Everything the workers receive from a spec — the data request, the student's job and the
    replicas' jobs (checkpoint paths aside: they hash the whole spec), BCWI's sweep."""
    import dataclasses

    from orchestrator.planning.plan import Plan, PlannedSplits, data_request

    parsed = parse_spec(document)
    plan = Plan(spec=parsed, data=data_request(parsed), splits=PlannedSplits("c", "f", 10))
    jobs = [plan.student_job(), *plan.replica_jobs()]
    return plan.data, [dataclasses.replace(job, checkpoint_uri="") for job in jobs], plan.bcwi_sweep


@pytest.mark.parametrize("section", sorted(NON_DEFAULT))
def test_every_spec_field_reaches_the_workers(section):
    """Each field of `train`, `method` and `data`, set away from its default, changes what the
    workers receive: a field the spec accepts and no consumer reads fails here."""
    from pipelines.spec import DataSpec, MethodSpec, TrainSpec

    model = {"train": TrainSpec, "method": MethodSpec, "data": DataSpec}[section]
    assert set(NON_DEFAULT[section]) | {f for s, f in SAME_AS_DEFAULT if s == section} == set(model.model_fields)
    base = {**BASE, "method": {"name": "elodi", "m": 2, "legacy_weight": 0.5}, "old": "old.pt", "init": "start.pt"}
    for name, value in NON_DEFAULT[section].items():
        around = {**base, **AROUND.get((section, name), {})}
        plain = {**around, section: {**around.get(section, {}), **BESIDE.get((section, name), {})}}
        changed = {**plain, section: {**plain[section], name: value}}
        assert consumers(changed) != consumers(plain), f"{section}.{name} reaches no worker"


def test_the_spec_precision_and_compile_mode_reach_the_training(tmp_path, monkeypatch):
    """`train.precision: bf16` trains differently from fp32 (same seed, same batches: other
    weights, other eval logits), and `train.compile` reaches torch.compile with its mode."""
    import numpy as np
    import torch

    from workers.models.checkpoints import load_model
    from workers.models.predict import predict_logits
    from workers.tasks.bodies import train_job
    from workers.tasks.resolve import cached_splits

    logits, records = {}, {}
    for precision in ("fp32", "bf16"):
        plan = preflight(spec(train={"epochs": 1, "precision": precision}, storage=str(tmp_path / precision)))
        records[precision] = train_job(plan.student_job())
        model = load_model(records[precision].checkpoint)[0]
        logits[precision] = predict_logits(model, cached_splits(plan.data).eval).numpy()
    assert records["bf16"].config["precision"] == "bf16" and records["fp32"].config["precision"] == "fp32"
    assert not np.allclose(logits["fp32"], logits["bf16"], atol=1e-4)
    modes = []
    monkeypatch.setattr(torch, "compile", lambda module, mode=None: modes.append(mode) or module)
    plan = preflight(spec(train={"epochs": 1, "compile": "reduce-overhead"}, storage=str(tmp_path / "compiled")))
    assert train_job(plan.student_job()).config["compile"] == "reduce-overhead" and modes == ["reduce-overhead"]


def test_student_epochs_lengthen_the_student_only():
    """`train.student_epochs`: the deployed model trains that long (its warm-up a tenth of it, at
    most 1 epoch); the replicas keep `epochs` and their checkpoints (keyed without it)."""
    from orchestrator.planning.plan import Plan, PlannedSplits, data_request

    def plan_of(train: dict) -> Plan:
        parsed = parse_spec({**BASE, "method": {"name": "elodi", "m": 2}, "train": train})
        return Plan(parsed, data_request(parsed), PlannedSplits("c", "f", 10))

    plain, longer = plan_of({"epochs": 5}), plan_of({"epochs": 5, "student_epochs": 15})
    assert plain.student_job().config.epochs == 5 and longer.student_job().config.epochs == 15
    assert longer.student_job().config.warmup_epochs == 1.0 and plain.student_job().config.warmup_epochs == 0.5
    assert [job.config for job in longer.replica_jobs()] == [job.config for job in plain.replica_jobs()]
    assert [job.checkpoint_uri for job in longer.replica_jobs()] == [job.checkpoint_uri for job in plain.replica_jobs()]


def test_replicas_started_from_other_weights_are_other_replicas():
    """The replicas' checkpoint key holds what `init` starts from (a file's content digest, not its
    path): another old model, or other weights under the same file name, train new replicas."""
    from orchestrator.planning.plan import ModelStart, Plan, PlannedSplits, data_request

    spec = parse_spec({**BASE, "method": {"name": "elodi", "m": 1}, "old": "old.pt", "init": "old"})

    def replica_uri(init_key):
        plan = Plan(spec, data_request(spec), PlannedSplits("c", "f", 10), start=ModelStart(init_key=init_key))
        return plan.replica_jobs()[0].checkpoint_uri

    assert replica_uri("digest-a") == replica_uri("digest-a") != replica_uri("digest-b")


def test_text_replicas_are_keyed_by_the_trained_tokenizer_not_its_settings():
    """Two tokenizers trained with the same `tokenizer:` settings but on other texts read the
    tweets otherwise: replicas trained through one are not the other's."""
    from orchestrator.planning.plan import ModelStart, Plan, PlannedSplits, data_request
    from workers.data.tokenizer import text_input

    spec = parse_spec(
        {**BASE, "arch": "text-bag", "data": {"dataset": "tweet-sentiment"}, "method": {"name": "elodi", "m": 1}}
    )

    def replica_uri(texts):
        inputs = text_input(texts, vocab_size=200, max_length=16)
        plan = Plan(spec, data_request(spec), PlannedSplits("c", "f", 3), start=ModelStart(inputs=inputs))
        return plan.replica_jobs()[0].checkpoint_uri

    one, other = ["good flight", "bad crew", "lost bags"] * 10, ["late again", "thanks so much", "never again"] * 10
    assert replica_uri(one) == replica_uri(one) != replica_uri(other)


def test_auto_fields_reach_its_candidates_and_its_choice():
    """`candidates` and `budget` change what Plan.auto trains; `max_er_increase` what it ships."""
    from orchestrator.policy.auto_choice import AUTO_CONFIDENCE, PairedCounts, choose, fixed_sequence
    from pipelines.auto import auto_choice

    def trained(**method):
        parsed = parse_spec({**BASE, "old": "old.pt", "method": {"name": "auto", "m": 2, **method}})
        return [c.name for c in auto_choice(parsed.method).candidates]

    every = trained()
    assert trained(candidates=["kd"]) == ["none", "kd"] != every
    assert trained(budget=4) == ["none", "proximal", "bcwi", "kd"] != every
    kd = PairedCounts(4350, 50, 50, 4350, 40, 80, 10, 50)  # ER change 0, its 95% bound +0.38 pt

    def ships(limit):
        method = parse_spec({**BASE, "old": "old.pt", "method": {"name": "auto", "max_er_increase": limit}}).method
        tests = fixed_sequence([("kd", kd, None)], method.max_er_increase, AUTO_CONFIDENCE)
        return choose(tests)

    assert ships(0.003) == "none" and ships(0.005) == "kd"


def record_reads(monkeypatch, *classes) -> dict:
    """{class: the field names the project's code reads of its instances} from now on: reads made
    by the dataclass machinery (asdict, ==, replace, repr) and by the records' own validation
    (`__post_init__`) do not count, only code of workers/ and orchestrator/."""
    import dataclasses
    import sys

    root = str(Path(__file__).resolve().parents[1])
    reads: dict = {cls: set() for cls in classes}
    for cls in classes:
        names = {f.name for f in dataclasses.fields(cls)}

        def getattribute(self, name, cls=cls, names=names):
            if name in names:
                caller = sys._getframe(1).f_code
                ours = caller.co_filename.startswith((root + "/workers/", root + "/orchestrator/"))
                if ours and caller.co_name != "__post_init__":
                    reads[cls].add(name)
            return object.__getattribute__(self, name)

        monkeypatch.setattr(cls, "__getattribute__", getattribute)
    return reads


def test_every_field_the_job_records_carry_is_read_by_the_workers(tmp_path, monkeypatch):
    """The stage bodies run the jobs a spec plans — a student distilling in its own process toward
    the old model (kd, fd-kl, dynamic-fd) or from replicas with the legacy term (elodi) — with every
    read of their TrainConfig and Objective recorded: a field the records carry that no worker
    reads fails here (the test above only shows that it reaches the records)."""
    import dataclasses

    import torch

    from workers.models.checkpoints import ModelSettings, save_checkpoint
    from workers.tasks.bodies import train_job
    from workers.training.config import TrainConfig
    from workers.training.objectives import Objective

    settings = ModelSettings("mlp-small", 10)
    old = str(save_checkpoint(tmp_path / "old.pt", settings.build(seed=9), settings))
    monkeypatch.setattr(torch, "compile", lambda module, mode=None: module)
    reads = record_reads(monkeypatch, TrainConfig, Objective)
    train = {"epochs": 1, "batch_size": 64, "compile": True, "max_grad_norm": 5.0, "augment": True}
    methods = [
        {"name": "kd", "temperature": 3.0},
        {"name": "fd-kl"},
        {"name": "dynamic-fd", "distance": "kl"},
        {"name": "proximal", "proximal_weight": 0.5},
        {"name": "elodi", "m": 1, "legacy_weight": 0.3, "k": 3},
    ]
    for i, method in enumerate(methods):
        document = {
            **BASE,
            "data": {"train_limit": 256, "eval_limit": 64},
            "method": method,
            "old": old,
            "train": train,
            "storage": str(tmp_path / f"runs-{i}"),
            "resources": {"teacher_actors": 0},
        }
        plan = preflight(parse_spec(document))
        teachers = [job.checkpoint_uri for job in plan.replica_jobs()]
        for job in plan.replica_jobs():
            train_job(job)
        train_job(plan.student_job(teachers=plan.teacher_groups(teachers)))
    for cls in (TrainConfig, Objective):
        unread = {f.name for f in dataclasses.fields(cls)} - reads[cls]
        assert not unread, f"{cls.__name__} fields no worker reads: {sorted(unread)}"
