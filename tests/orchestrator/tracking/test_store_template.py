"""A new SQLite store is a copy of a migrated empty one
(:mod:`orchestrator.tracking.store_template`): MLflow's schema and Default experiment, as if
MLflow had made it, the empty store made once per MLflow version, and no half-copied store."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import mlflow
import pytest
from mlflow import MlflowClient

from orchestrator.tracking import store_template
from orchestrator.tracking.store import client_for


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Zephon's home, empty, and the working directory a folder of its own."""
    monkeypatch.setenv("ZEPHON_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    return tmp_path / "home"


def tables(db: Path) -> dict[str, list[str]]:
    """Every table of ``db`` with its columns."""
    with sqlite3.connect(db) as con:
        names = [n for (n,) in con.execute("select name from sqlite_master where type='table'")]
        return {n: sorted(c[1] for c in con.execute(f'pragma table_info("{n}")')) for n in names}


def rows(db: Path, table: str) -> list[tuple]:
    with sqlite3.connect(db) as con:
        return con.execute(f'select * from "{table}"').fetchall()


def test_a_new_store_is_the_one_mlflow_makes(home: Path, tmp_path: Path) -> None:
    made = tmp_path / "runs" / "mlflow.db"
    ours = client_for(f"sqlite:///{made}")
    by_mlflow = tmp_path / "by-mlflow.db"
    theirs = MlflowClient(tracking_uri=f"sqlite:///{by_mlflow}")

    assert [e.name for e in ours.search_experiments()] == ["Default"]
    assert [e.name for e in theirs.search_experiments()] == ["Default"]
    assert tables(made) == tables(by_mlflow)
    for table in ("alembic_version", "workspaces"):
        assert rows(made, table) == rows(by_mlflow, table)
    # the Default experiment where MLflow puts it for a store made here, not where the
    # empty store was made
    default = ours.get_experiment("0")
    assert default.artifact_location == theirs.get_experiment("0").artifact_location
    assert default.artifact_location == str(tmp_path / "mlruns" / "0")
    ours.create_experiment("x")
    assert ours.get_experiment_by_name("x").experiment_id == "1"  # as in MLflow's own store


def test_the_empty_store_is_made_once_per_mlflow_version(home: Path, tmp_path: Path) -> None:
    client_for(f"sqlite:///{tmp_path / 'a.db'}").search_experiments()
    template = home / store_template.TEMPLATES / f"mlflow-{mlflow.__version__}.db"
    assert template.is_file() and rows(template, "experiments") == []
    made_at = template.stat().st_mtime_ns
    client_for(f"sqlite:///{tmp_path / 'b.db'}").search_experiments()
    assert template.stat().st_mtime_ns == made_at
    assert sorted(p.name for p in template.parent.iterdir()) == [
        template.name,
        f"{template.name}.lock",
    ]


def test_an_existing_store_is_opened_not_replaced(home: Path, tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client_for(uri).create_experiment("kept")
    assert client_for(uri).get_experiment_by_name("kept") is not None


def test_a_copy_that_fails_leaves_no_store(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def disk_full(source: str, target: str) -> None:
        Path(target).write_bytes(Path(source).read_bytes()[:4096])  # a torn copy, then
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store_template.shutil, "copyfile", disk_full)
    with pytest.raises(OSError, match="No space left"):
        client_for(f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}")
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["mlflow.db.lock"]
