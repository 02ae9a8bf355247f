"""The job queue's SQLite file: its schema, one connection per thread, write transactions,
and the rows of its tables as jobs and events.

Standard library and the error classes only, like the queue (:mod:`.queue`) that uses it.

Design: docs/design/orchestrator_service.md
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from orchestrator.errors import QueueError
from orchestrator.service.job import Event, Job, JobKind, JobState

SCHEMA_VERSION = 3
"""1: jobs and events; 2: attempts (for device-hours); 3: the jobs' Slurm job and state.
Every statement of the schema is ``IF NOT EXISTS`` and missing columns are added
(:data:`ADDED_COLUMNS`), so opening an older file adds what it lacks."""
BUSY_TIMEOUT_S = 30.0

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS jobs (
        id TEXT PRIMARY KEY,
        key TEXT NOT NULL UNIQUE,
        submitter TEXT NOT NULL,
        kind TEXT NOT NULL,
        spec TEXT NOT NULL,
        spec_hash TEXT NOT NULL,
        state TEXT NOT NULL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        dp_sizes TEXT NOT NULL DEFAULT '[]',
        run_folder TEXT,
        mlflow_run_id TEXT,
        pid INTEGER,
        result TEXT,
        error TEXT,
        cancel_requested INTEGER NOT NULL DEFAULT 0,
        slurm_job_id TEXT,
        slurm_state TEXT
    )""",
    "CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs (state, created_at, id)",
    "CREATE INDEX IF NOT EXISTS jobs_by_submitter ON jobs (submitter, state)",
    "CREATE INDEX IF NOT EXISTS jobs_by_created ON jobs (created_at, id)",
    """CREATE TABLE IF NOT EXISTS events (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        job_id TEXT NOT NULL REFERENCES jobs (id),
        at REAL NOT NULL,
        state TEXT NOT NULL,
        detail TEXT NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS events_by_job ON events (job_id, seq)",
    # One row per attempt, for the device-hours of budgets (orchestrator/service/daily_budgets.py).
    """CREATE TABLE IF NOT EXISTS attempts (
        job_id TEXT NOT NULL REFERENCES jobs (id),
        number INTEGER NOT NULL,
        submitter TEXT NOT NULL,
        devices INTEGER NOT NULL,
        started_at REAL NOT NULL,
        ended_at REAL,
        PRIMARY KEY (job_id, number)
    )""",
    "CREATE INDEX IF NOT EXISTS attempts_by_end ON attempts (ended_at)",
    # One submitter's runs of the day, without reading its older jobs.
    "CREATE INDEX IF NOT EXISTS jobs_by_submitter_created ON jobs (submitter, created_at)",
)

ADDED_COLUMNS = {"jobs": ("slurm_job_id TEXT", "slurm_state TEXT")}
"""Columns added to a table after its first version: a file older than them gets them."""


class QueueDatabase:
    """One queue file in WAL mode, its schema created on first open; each thread of each
    process gets its own connection."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._local = threading.local()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._create_schema()

    def connection(self) -> sqlite3.Connection:
        """This thread's connection (a new one after a fork)."""
        local = self._local
        if getattr(local, "pid", None) != os.getpid():
            db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            db.row_factory = sqlite3.Row
            db.execute("PRAGMA synchronous = FULL")
            db.execute("PRAGMA foreign_keys = ON")
            local.db, local.pid = db, os.getpid()
        return local.db

    def close(self) -> None:
        """Close the calling thread's connection (the next call opens a new one)."""
        local = self._local
        if getattr(local, "pid", None) == os.getpid():
            local.db.close()
        local.pid = None

    @contextmanager
    def write_transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: the write lock is taken before the first read."""
        db = self.connection()
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    def _switch_to_wal(self, db: sqlite3.Connection) -> str:
        """Set WAL journal mode (kept in the file); the mode the file is in afterwards.

        SQLite does not wait out its busy timeout here: when several processes open a new
        file at once, all but one get "database is locked" at once, so this retries.
        """
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        while True:
            try:
                return db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            except sqlite3.OperationalError as e:
                if e.sqlite_errorcode != sqlite3.SQLITE_BUSY or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def _create_schema(self) -> None:
        db = self.connection()
        mode = self._switch_to_wal(db)
        if mode != "wal":
            raise QueueError(
                f"could not switch queue {str(self.path)!r} to WAL journal mode (it is {mode!r}); "
                "put the queue on a local file system"
            )
        if db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION:
            return
        with self.write_transaction() as db:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise QueueError(
                    f"queue {str(self.path)!r} has schema version {version}, newer than this "
                    f"Zephon's {SCHEMA_VERSION}; upgrade Zephon"
                )
            for statement in _SCHEMA:
                db.execute(statement)
            for table, columns in ADDED_COLUMNS.items():
                present = {row["name"] for row in db.execute(f"PRAGMA table_info({table})")}
                for column in columns:
                    if column.split()[0] not in present:
                        db.execute(f"ALTER TABLE {table} ADD COLUMN {column}")
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def fetch_job_row(db: sqlite3.Connection, job_id: str) -> sqlite3.Row:
    """The row of job ``job_id``; QueueError if there is none."""
    row = db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
    if row is None:
        raise QueueError(f"no job {job_id!r} in the queue; list the jobs to find its id")
    return row


def update_job_columns(db: sqlite3.Connection, job_id: str, values: dict[str, Any]) -> None:
    """Set the columns ``values`` names (the queue's own names, never a caller's strings)."""
    columns = ", ".join(f"{name} = ?" for name in values)
    db.execute(f"UPDATE jobs SET {columns} WHERE id = ?", (*values.values(), job_id))


def insert_event(
    db: sqlite3.Connection, job_id: str, *, at: float, state: JobState, detail: str
) -> None:
    """Record that job ``job_id`` went to ``state`` at ``at``."""
    db.execute(
        "INSERT INTO events (job_id, at, state, detail) VALUES (?, ?, ?, ?)",
        (job_id, at, state, detail),
    )


def start_attempt(db: sqlite3.Connection, row: sqlite3.Row, *, at: float, devices: int) -> None:
    """Record that the job of ``row`` (read before the change) starts its next attempt on
    ``devices`` devices at ``at``."""
    db.execute(
        "INSERT INTO attempts (job_id, number, submitter, devices, started_at)"
        " VALUES (?, ?, ?, ?, ?)",
        (row["id"], row["attempts"] + 1, row["submitter"], devices, at),
    )


def end_attempt(db: sqlite3.Connection, job_id: str, *, at: float) -> None:
    """Record that the running attempt of ``job_id`` (if recorded) ended at ``at``."""
    db.execute(
        "UPDATE attempts SET ended_at = ? WHERE job_id = ? AND ended_at IS NULL", (at, job_id)
    )


def event_from_row(row: sqlite3.Row) -> Event:
    """The event an ``events`` row holds."""
    return Event(row["job_id"], row["at"], JobState(row["state"]), row["detail"])


def job_from_row(row: sqlite3.Row) -> Job:
    """The job a ``jobs`` row holds."""
    return Job(
        id=row["id"],
        key=row["key"],
        submitter=row["submitter"],
        kind=JobKind(row["kind"]),
        spec=json.loads(row["spec"]),
        spec_hash=row["spec_hash"],
        state=JobState(row["state"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        attempts=row["attempts"],
        dp_sizes=json.loads(row["dp_sizes"]),
        run_folder=row["run_folder"],
        mlflow_run_id=row["mlflow_run_id"],
        pid=row["pid"],
        result=None if row["result"] is None else json.loads(row["result"]),
        error=row["error"],
        cancel_requested=bool(row["cancel_requested"]),
        slurm_job_id=row["slurm_job_id"],
        slurm_state=row["slurm_state"],
    )
