"""Two small datasets (37 prose-like and 11 code-like records) for plan tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline import Dataset
from tests.support.helpers import two_datasets


@pytest.fixture()
def small(tmp_path: Path) -> list[Dataset]:
    """The two datasets, each drawn from once (``exhausted="stop"``)."""
    return two_datasets(tmp_path, "stop")


@pytest.fixture()
def endless(tmp_path: Path) -> list[Dataset]:
    """The two datasets, repeated epoch after epoch (``exhausted="repeat"``)."""
    return two_datasets(tmp_path, "repeat")
