"""A new SQLite tracking store, copied from an empty one whose schema is already migrated.

MLflow makes a new SQLite store by running every schema migration of its history: about 2 s
of CPU, paid by the first command in each new folder (and by every test that tracks). The
result is the same for every store of one MLflow version, so Zephon migrates one empty store
per MLflow version under :func:`~pipeline.paths.zephon_home` and copies it. The copy has no
Default experiment: MLflow adds it when the copy is first opened, with the artifact location
it gives any new store (``./mlruns/0`` where the command runs).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from pipeline.filelock import file_lock
from pipeline.paths import zephon_home

TEMPLATES = "mlflow-stores"
"""The folder under Zephon's home holding one migrated empty store per MLflow version."""


def create_store(db: Path) -> None:
    """Create the SQLite store ``db`` (absent, its lock held by the caller) as a copy of
    the migrated empty store; the copy appears whole or not at all."""
    db.parent.mkdir(parents=True, exist_ok=True)
    partial = db.with_name(f".{db.name}.{os.getpid()}.partial")
    try:
        shutil.copyfile(migrated_template(), partial)
        os.replace(partial, db)
    finally:
        partial.unlink(missing_ok=True)


def migrated_template() -> Path:
    """The empty store of this MLflow version, its schema migrated (made on first use)."""
    import mlflow  # deferred: imported, its migration logs quieted, by store.load_mlflow

    folder = zephon_home() / TEMPLATES
    template = folder / f"mlflow-{mlflow.__version__}.db"
    if template.is_file():
        return template
    with file_lock(folder / f"{template.name}.lock"):
        if template.is_file():  # made by another process while this one waited
            return template
        import sqlalchemy  # deferred: MLflow's dependency, loaded with it
        from mlflow.store.db.utils import _initialize_tables  # what MLflow runs on a new store

        with tempfile.TemporaryDirectory(dir=folder) as work:
            made = Path(work) / "store.db"
            # An engine of its own, disposed of before the file moves (MLflow's stores keep
            # theirs open, per URI, for the life of the process).
            engine = sqlalchemy.create_engine(f"sqlite:///{made}")
            try:
                _initialize_tables(engine)
            finally:
                engine.dispose()
            os.replace(made, template)
    return template
