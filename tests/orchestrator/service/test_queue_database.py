"""orchestrator.service.queue_database on real SQLite files: a new file switched to WAL by
many processes at once, the schema version, and the values stored as plain text."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from orchestrator.errors import QueueError
from orchestrator.service.job import JobState
from orchestrator.service.queue import JobQueue
from orchestrator.service.queue_database import SCHEMA_VERSION, QueueDatabase
from tests.support.processes import forked_process_context


def _open_worker(paths: list[str], worker: int, barrier: Any) -> None:
    """Open each new queue file at the same moment as the other workers, and submit."""
    try:
        for path in paths:
            barrier.wait(timeout=120)
            queue = JobQueue(path)
            queue.submit({"worker": worker}, key=f"w{worker}", submitter=f"agent-{worker}")
    except BaseException:
        barrier.abort()  # the others fail at once instead of waiting out the timeout
        raise


def test_many_processes_create_a_new_queue_at_once(tmp_path: Path) -> None:
    # Switching a new file to WAL does not wait out SQLite's busy timeout; opening must retry.
    workers = 12
    paths = [str(tmp_path / f"new-{i}" / "jobs.db") for i in range(40)]
    ctx = forked_process_context(__name__)
    barrier = ctx.Barrier(workers)
    procs = [ctx.Process(target=_open_worker, args=(paths, w, barrier)) for w in range(workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0] * workers
    for path in paths:
        assert len(JobQueue(path).list()) == workers
        with closing(sqlite3.connect(path)) as db:
            assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_queue_of_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    QueueDatabase(path).close()
    with closing(sqlite3.connect(path)) as db:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(QueueError, match=f"newer than this Zephon's {SCHEMA_VERSION}; upgrade"):
        QueueDatabase(path)


def test_a_version_1_queue_gets_the_attempts_table_and_keeps_its_jobs(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    queue = JobQueue(path)
    job, _ = queue.submit({"n": 1}, key="k", submitter="alice")
    queue.close()
    with closing(sqlite3.connect(path)) as db:  # as version 1 wrote it: no attempts
        db.execute("DROP TABLE attempts")
        db.execute("PRAGMA user_version = 1")
    queue = JobQueue(path)
    queue.transition(job.id, JobState.RUNNING, dp=2)
    assert queue.get(job.id).state == JobState.RUNNING
    with closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert db.execute("SELECT job_id, number, devices FROM attempts").fetchall() == [
            (job.id, 1, 2)
        ]


def test_a_version_2_queue_gets_the_slurm_columns_and_keeps_its_jobs(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    queue = JobQueue(path)
    job, _ = queue.submit({"n": 1}, key="k", submitter="alice")
    queue.close()
    with closing(sqlite3.connect(path)) as db:  # as version 2 wrote it: no Slurm columns
        db.execute("ALTER TABLE jobs DROP COLUMN slurm_job_id")
        db.execute("ALTER TABLE jobs DROP COLUMN slurm_state")
        db.execute("PRAGMA user_version = 2")
    queue = JobQueue(path)
    assert queue.get(job.id).slurm_job_id is None
    queue.transition(job.id, JobState.RUNNING, dp=1, slurm_job_id="41", slurm_state="PENDING")
    assert (queue.get(job.id).slurm_job_id, queue.get(job.id).slurm_state) == ("41", "PENDING")
    with closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_kinds_and_states_are_stored_as_their_names(tmp_path: Path) -> None:
    # queue files written before the states were an enum read the same, and vice versa
    queue = JobQueue(tmp_path / "jobs.db")
    job, _ = queue.submit({"n": 1}, key="k", submitter="alice", kind="plan")
    queue.transition(job.id, JobState.RUNNING)
    with closing(sqlite3.connect(queue.path)) as db:
        assert db.execute("SELECT kind, state FROM jobs").fetchall() == [("plan", "running")]
        assert db.execute("SELECT state FROM events ORDER BY seq").fetchall() == [
            ("queued",),
            ("running",),
        ]
