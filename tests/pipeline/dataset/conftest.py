"""Every dataset test gets a ZEPHON_HOME of its own."""

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _private_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZEPHON_HOME", str(tmp_path / "home"))
