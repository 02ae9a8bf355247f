"""Fixtures of the end-to-end tests: the small corpus their trainings read, a Slurm cluster."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.slurm import LocalSlurm, cluster_for_tests
from tests.support.titan_run import corpus


@pytest.fixture(scope="session")
def domains(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Path]]:
    """The shared small corpus (:func:`tests.support.titan_run.corpus`), per domain."""
    return corpus(tmp_path_factory.getbasetemp())


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalSlurm]:
    """A two-node Slurm cluster on this machine for the module's tests."""
    with cluster_for_tests() as slurm:
        yield slurm
