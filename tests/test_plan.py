"""Preflight and the plan, without Ray: what the spec resolves to (augmentation), the stages a
method runs, and what the cluster must hold."""

import json
from pathlib import Path

import pytest

from datafiles import write_idx_dataset
from fresh_python import fresh_python
from orchestrator.planning.plan import applied_params, train_config
from orchestrator.planning.preflight import preflight
from pipelines.spec import WorkerResources, parse_spec

BASE = {
    "model": "plan",
    "version": "v2",
    "arch": "mlp-small",
    "method": {"name": "none"},
    "data": {"train_limit": 300, "eval_limit": 100},
    "train": {"augment": True},  # mlp-small's own default is off; these tests look at what augmentation does
}


def spec(**fields):
    """BASE with `fields`; a `train` given is laid over BASE's."""
    train = {**BASE["train"], **fields.pop("train", {})}
    return parse_spec({**BASE, **fields, "train": train})


@pytest.fixture(scope="module")
def digits_folder(tmp_path_factory, fashion_mnist) -> Path:
    """A user dataset (`data.path`): an IDX directory of 400 real images."""
    folder = tmp_path_factory.mktemp("user-data") / "idx"
    return write_idx_dataset(
        folder, fashion_mnist.train.images[:400, 0].numpy(), fashion_mnist.train.labels[:400].numpy()
    )


def test_flip_is_on_for_fashion_mnist_and_off_for_user_data(digits_folder):
    """A mirrored digit can change its class: `flip: auto` flips only the built-in Fashion-MNIST and
    photos resized to `data.image_size`, which also crop at random sizes (`crop: auto`)."""
    one_cpu = WorkerResources()
    builtin = train_config(spec(), 0, one_cpu)
    assert builtin.augmentation == (2, True)
    user = preflight(spec(data={"path": str(digits_folder)}))
    config = user.student_job().config
    assert config.augmentation == (2, False)
    assert all(
        not job.config.augmentation[1]
        for job in preflight(
            spec(data={"path": str(digits_folder)}, method={"name": "ensemble", "m": 2})
        ).replica_jobs()
    )
    assert applied_params(user.spec) == {"augment.crop": "2", "augment.flip": "false", "warmup.student_epochs": "0"}
    assert applied_params(spec()) == {"augment.crop": "2", "augment.flip": "true", "warmup.student_epochs": "0"}
    photos = preflight(spec(data={"path": str(digits_folder), "image_size": 16}))
    assert photos.student_job().config.augmentation == ("resized", True)  # photos at a size: crops and flips
    assert applied_params(photos.spec)["augment.crop"] == "resized"


@pytest.mark.parametrize(
    "train,applied",
    [
        ({"flip": True}, (True, 2, True)),
        ({"flip": False}, (True, 2, False)),
        ({"crop": 0}, (False, 0, False)),  # user data: no flip either, so nothing to apply
        ({"crop": 0, "flip": True}, (True, 0, True)),
        ({"crop": 4, "flip": False}, (True, 4, False)),
        ({"crop": 0, "flip": False}, (False, 0, False)),
        ({"augment": False, "flip": True}, (False, 0, False)),  # the master switch wins
    ],
)
def test_crop_and_flip_are_configured_separately(digits_folder, train, applied):
    resolved = spec(data={"path": str(digits_folder)}, train=train)
    config = train_config(resolved, 0, WorkerResources())
    assert config.augmentation == applied[1:]
    assert applied_params(resolved) == {
        "augment.crop": str(applied[1]),
        "augment.flip": str(applied[2]).lower(),
        "warmup.student_epochs": "0",
    }


@pytest.mark.parametrize(
    "method,train,student,replicas",
    [
        ({"name": "elodi", "m": 2}, {"epochs": 20}, 1.0, 0.0),  # LDI: a warm-up epoch; the replicas train plainly
        ({"name": "elodi", "m": 2}, {"epochs": 4}, 0.4, 0.0),  # at most a tenth of a short run
        ({"name": "elodi", "m": 2}, {"epochs": 20, "warmup_epochs": 0}, 0.0, 0.0),
        (
            {"name": "elodi", "m": 2},
            {"epochs": 20, "warmup_epochs": 2.5},
            2.5,
            2.5,
        ),  # a number applies to every training
        ({"name": "none"}, {"epochs": 20}, 0.0, None),
    ],
)
def test_warmup_auto_is_for_the_ldi_student(method, train, student, replicas):
    plan = preflight(spec(method=method, train=train))
    assert plan.student_job().config.warmup_epochs == student
    assert applied_params(plan.spec)["warmup.student_epochs"] == f"{student:g}"
    if replicas is not None:
        assert {job.config.warmup_epochs for job in plan.replica_jobs()} == {replicas}


def test_a_method_without_a_pool_counts_no_teacher_actors():
    """Method none with `student.cpus: 2` fits a 2-CPU machine: it starts no teacher actor."""
    from orchestrator.planning.resources import check_resources
    from pipelines.spec import SpecError

    two_cpus = {"CPU": 2.0, "GPU": 0.0}
    none = spec(resources={"student": {"cpus": 2}})
    check_resources(none, two_cpus, replicas=False, student=True, pool_actors=0)
    with pytest.raises(SpecError, match=r"resources: student \+ 2 teacher actors need 3.0 CPU / 0.0 GPU at once"):
        check_resources(
            spec(method={"name": "fd-lm"}, old="o.pt", resources={"student": {"cpus": 2}}),
            two_cpus,
            replicas=False,
            student=True,
            pool_actors=2,
        )
    # replicas are counted only for methods that train them
    check_resources(spec(resources={"replica": {"gpus": 1}}), two_cpus, replicas=False, student=True, pool_actors=0)
    with pytest.raises(SpecError, match="resources.replica: asks 1.0 CPU / 1.0 GPU, cluster has 2.0 / 0.0"):
        check_resources(
            spec(method={"name": "ensemble"}, resources={"replica": {"gpus": 1}}),
            two_cpus,
            replicas=True,
            student=False,
            pool_actors=2,
        )


def test_the_plan_says_which_stages_and_actors_a_method_starts(digits_folder):
    data = {"path": str(digits_folder)}
    plans = {name: preflight(spec(data=data, method={"name": name, "m": 2})) for name in ("none", "ensemble", "elodi")}
    assert [(p.needs_replicas, p.needs_student, p.pool_actors) for p in plans.values()] == [
        (False, True, 0),
        (True, False, 2),
        (True, True, 2),
    ]


def test_stage_titles_are_numbered_over_the_stages_the_method_runs(digits_folder):
    from orchestrator.driver.pipeline import stage_titles

    data = {"path": str(digits_folder)}
    assert stage_titles(preflight(spec(data=data))) == [
        "stage 1/2: training the model (none)",
        "stage 2/2: evaluating on the regression-eval split",
    ]
    assert stage_titles(preflight(spec(data=data, method={"name": "elodi", "m": 2}))) == [
        "stage 1/3: training 2 replicas of mlp-small in parallel",
        "stage 2/3: distilling the student (elodi) online from 2 teacher actors",
        "stage 3/3: evaluating on the regression-eval split",
    ]
    assert [t.split(":")[0] for t in stage_titles(preflight(spec(data=data, method={"name": "ensemble", "m": 2})))] == [
        "stage 1/2",
        "stage 2/2",
    ]


def test_resources_beyond_this_machine_are_refused_before_ray_starts_or_mlflow_is_touched(tmp_path):
    """An embedded Ray is checked against os.cpu_count() before it starts: exit 2, one line, Ray not
    started, no MLflow store created."""
    import os

    import yaml

    path = tmp_path / "big.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                **BASE,
                "method": {"name": "ensemble", "m": 2},
                "storage": str(tmp_path / "s"),
                "resources": {"replica": {"cpus": 100000}},
            }
        )
    )
    probe = (
        "import sys, ray\nfrom orchestrator.cli import main\ncode = main(['run', sys.argv[1]])\n"
        "print('ray started' if ray.is_initialized() else 'ray not started')\nsys.exit(code)"
    )
    done = fresh_python(probe, str(path), cwd=tmp_path, drop=("RAY_ADDRESS", "MLFLOW_TRACKING_URI"))
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines() == [
        f"congruent run: error: {path}: resources.replica: asks 100000.0 CPU / 0.0 GPU, cluster has "
        f"{float(os.cpu_count())} / 0.0"
    ]
    assert done.stdout.strip() == "ray not started"
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "s").exists()


def test_a_version_is_tagged_without_empty_lineage_or_flip_tags(digits_folder):
    """v1 has no parent and no flips: its registry tags leave them out instead of holding ""."""
    from orchestrator.driver.publish import version_record

    plan = preflight(spec(data={"path": str(digits_folder)}))
    tags = version_record(plan.spec, plan, {"error_rate": 0.25}).to_tags()
    assert sorted(tags) == ["arch", "classes", "error_rate", "fingerprint", "label", "method", "spec_hash"]
    assert all(tags.values()) and json.loads(tags["classes"]) == [str(c) for c in range(10)]
    undefined = {"n": 200, "nfr": 0.0, "pfr": 0.1, "rel_nfr": None, "er_old": 0.3, "er_new": 0.0}
    tags = version_record(plan.spec, plan, {"error_rate": 0.0, "vs_old": undefined}).to_tags()
    assert (tags["nfr"], tags["pfr"]) == ("0.000000", "0.100000") and "rel_nfr" not in tags
    assert tags["n_compared"] == "200"  # what the bounds `versions` shows count over


def test_the_plan_carries_what_execution_needs_of_the_data_and_travels_to_workers_without_the_split(digits_folder):
    """Preflight reads the splits once; the Plan keeps their class names, the eval labels (in the
    eval split's order) and the training split for the driver's teacher pool. Pickled for a Ray
    worker (Tune's trials get the Plan so), it travels without the training split."""
    import pickle

    from workers.tasks.resolve import cached_splits

    plan = preflight(spec(data={"path": str(digits_folder)}))
    splits = cached_splits(plan.data)
    assert plan.splits.class_names == splits.train.classes and len(plan.splits.class_names) == plan.splits.num_classes
    assert plan.splits.eval_labels.tolist() == splits.eval.labels.tolist()
    assert plan.splits.train_split is splits.train
    sent = pickle.loads(pickle.dumps(plan))
    assert sent.splits.train_split is None and plan.splits.train_split is splits.train
    assert (
        sent.splits.class_names == plan.splits.class_names
        and sent.splits.eval_labels.tolist() == plan.splits.eval_labels.tolist()
    )
    assert sent.spec == plan.spec and sent.splits.content_key == plan.splits.content_key
