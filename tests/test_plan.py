"""Preflight and the plan, without Ray: what the spec resolves to (augmentation), the stages a
method runs, and what the cluster must hold."""

from pathlib import Path

import pytest

from datafiles import write_idx_dataset
from orchestrator.driver.plan import augmentation_params, preflight, train_config
from pipelines.spec import WorkerResources, parse_spec

BASE = {"model": "plan", "version": "v2", "arch": "mlp-small", "method": {"name": "none"},
        "data": {"train_limit": 300, "eval_limit": 100}}


def spec(**fields):
    return parse_spec({**BASE, **fields})


@pytest.fixture(scope="module")
def digits_folder(tmp_path_factory, fashion_mnist) -> Path:
    """A user dataset (`data.path`): an IDX directory of 400 real images."""
    folder = tmp_path_factory.mktemp("user-data") / "idx"
    return write_idx_dataset(folder, fashion_mnist.train.images[:400, 0].numpy(),
                             fashion_mnist.train.labels[:400].numpy())


def test_flip_is_on_for_fashion_mnist_and_off_for_user_data(digits_folder):
    """A mirrored digit can change its class: `flip: auto` flips only the built-in Fashion-MNIST."""
    one_cpu = WorkerResources()
    builtin = train_config(spec(), 0, one_cpu)
    assert (builtin.augment, builtin.augment_padding, builtin.augment_flip) == (True, 2, True)
    user = preflight(spec(data={"path": str(digits_folder)}))
    config = user.student_job().config
    assert (config.augment, config.augment_padding, config.augment_flip) == (True, 2, False)
    assert all(not job.config.augment_flip for job in
               preflight(spec(data={"path": str(digits_folder)}, method={"name": "ensemble", "m": 2})).replica_jobs())
    assert augmentation_params(user.spec) == {"augment.crop": "2", "augment.flip": "false"}
    assert augmentation_params(spec()) == {"augment.crop": "2", "augment.flip": "true"}


@pytest.mark.parametrize("train,applied", [
    ({"flip": True}, (True, 2, True)),
    ({"flip": False}, (True, 2, False)),
    ({"crop": 0}, (False, 0, False)),  # user data: no flip either, so nothing to apply
    ({"crop": 0, "flip": True}, (True, 0, True)),
    ({"crop": 4, "flip": False}, (True, 4, False)),
    ({"crop": 0, "flip": False}, (False, 0, False)),
    ({"augment": False, "flip": True}, (False, 0, False)),  # the master switch wins
])
def test_crop_and_flip_are_configured_separately(digits_folder, train, applied):
    resolved = spec(data={"path": str(digits_folder)}, train=train)
    config = train_config(resolved, 0, WorkerResources())
    assert (config.augment, config.augment_padding, config.augment_flip) == applied
    assert augmentation_params(resolved) == {"augment.crop": str(applied[1]), "augment.flip": str(applied[2]).lower()}
