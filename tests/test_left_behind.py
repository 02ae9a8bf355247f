"""The session's check that the tests leave nothing in the checkout or the temporary folder."""

from __future__ import annotations

from tests.conftest import left_behind


def test_only_what_is_new_and_unexpected_is_left_behind() -> None:
    before = {"runs_v0.tar", "tmp: pytest-of-me", "tmp: db_init_lock-old"}
    after = before | {
        "mlflow.db",
        "slurm-12.out",
        "tmp: zephon-io-x1",
        "tests/__pycache__/",
        ".venv",
        "tmp: pytest-of-you",
    }
    assert left_behind(before, after) == ["mlflow.db", "slurm-12.out", "tmp: zephon-io-x1"]
    assert left_behind(after, before) == []
