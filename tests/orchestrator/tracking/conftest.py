"""Fixtures of the tracking tests: one SQLite store per module, one experiment per test."""

from __future__ import annotations

import pytest

from orchestrator.tracking.uris import check_tracking, resolve_uri


@pytest.fixture(scope="module")
def db_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One migrated SQLite store for the module (migrating a new one costs ~2 s)."""
    uri = resolve_uri(None, tmp_path_factory.mktemp("store"))
    check_tracking(uri)
    return uri


@pytest.fixture
def experiment_name(request: pytest.FixtureRequest) -> str:
    """A fresh MLflow experiment per test, so searches see only this test's runs."""
    return f"t-{request.node.name}"
