"""Shared fixtures: the real Fashion-MNIST splits, loaded once per session."""

import pytest

from workers.data import load_splits


@pytest.fixture(scope="session")
def fashion_mnist():
    """Fashion-MNIST from the Debian package (installed by `make test`), all of it."""
    return load_splits("fashion-mnist")
