"""The job queue: durable, idempotent submission of experiments to the scheduler.

One SQLite file (WAL) that survives restarts and needs no server; it imports only the
standard library and the error classes. Every change is one ``BEGIN IMMEDIATE``
transaction, so the checks deciding it and the change see no other writer, in any
process or thread. Keep the file on a local file system (not NFS).

Design: docs/design/orchestrator_service.md
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from orchestrator.errors import QueueError, QueueFull, TransitionError

STATES = ("queued", "running", "succeeded", "failed", "cancelled", "preempted")
FINAL = {"succeeded", "failed", "cancelled"}
TRANSITIONS = {
    "queued": {"running", "cancelled"},
    "running": {"succeeded", "failed", "cancelled", "preempted"},
    "preempted": {"running", "cancelled"},
}
"""Allowed state changes; final states have none."""
KINDS = ("run", "plan", "verify")
NOT_FINAL = tuple(s for s in STATES if s not in FINAL)
"""States that count against a submitter's limit: queued, running, preempted."""
SCHEMA_VERSION = 1
BUSY_TIMEOUT_S = 30.0
MAX_NAME_LEN = 200
"""Longest key or submitter."""
FIELDS: dict[str, tuple[tuple[type, ...], str]] = {
    "run_folder": ((str, os.PathLike), "a path"),
    "mlflow_run_id": ((str,), "a string"),
    "pid": ((int,), "an integer"),
    "result": ((dict,), "a dict"),
    "error": ((str,), "a string"),
}
"""Job fields ``transition`` and ``update`` may set, their types and how to name them
(``transition`` also takes ``dp``)."""

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
        cancel_requested INTEGER NOT NULL DEFAULT 0
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
)


@dataclass(frozen=True)
class Job:
    """One submitted experiment, as stored in the queue."""

    id: str
    """``"j-"`` + 12 random hex digits."""
    key: str
    """The client's idempotency key (unique in the queue)."""
    submitter: str
    """Who submitted it (the per-submitter limit counts by this)."""
    kind: str
    """``run`` (train), ``plan`` (dry run) or ``verify`` (elasticity check, trains)."""
    spec: dict[str, Any]
    """The experiment, as its canonical JSON read back."""
    spec_hash: str
    """SHA-256 of the canonical JSON of ``spec`` (sorted keys, compact separators)."""
    state: str
    """queued, running, succeeded, failed, cancelled or preempted."""
    created_at: float
    """Submission time (``time.time()``)."""
    updated_at: float
    """Time of the last change."""
    attempts: int
    """Times it went to running."""
    dp_sizes: list[int]
    """Data-parallel size of each attempt that gave one, in order."""
    run_folder: str | None
    """The run folder of the current (or last) attempt."""
    mlflow_run_id: str | None
    """The MLflow run, once known."""
    pid: int | None
    """Process of the current attempt, for the scheduler to check it is alive."""
    result: dict[str, Any] | None
    """Outcome recorded by the scheduler (e.g. final metrics)."""
    error: str | None
    """Why it failed, if it did."""
    cancel_requested: bool
    """A cancel arrived while it was running; the scheduler is to stop it."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Event:
    """One state change of a job."""

    job_id: str
    """The job that changed."""
    at: float
    """When (``time.time()``)."""
    state: str
    """The state it went to."""
    detail: str
    """The caller's note ("" if none)."""


def canonical_json(value: Any) -> str:
    """``value`` as canonical JSON: sorted keys, compact separators, no NaN or infinity."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


class JobQueue:
    """The queue in one SQLite file (schema and protocol:
    docs/design/orchestrator_service.md).

    Safe to use from several threads and processes at once: each thread of each process
    gets its own connection.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, max_queued_per_submitter: int = 1000
    ) -> None:
        if isinstance(max_queued_per_submitter, bool) or not isinstance(
            max_queued_per_submitter, int
        ):
            raise QueueError(
                f"max_queued_per_submitter must be an integer, not {max_queued_per_submitter!r}"
            )
        if max_queued_per_submitter < 1:
            raise QueueError(
                f"max_queued_per_submitter is {max_queued_per_submitter}; it must be at least 1"
            )
        self.path = Path(path)
        self.max_queued_per_submitter = max_queued_per_submitter
        self._local = threading.local()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._create_schema()

    def __repr__(self) -> str:
        return f"JobQueue({str(self.path)!r})"

    # -- connections and transactions --------------------------------------------------------

    def _get_connection(self) -> sqlite3.Connection:
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
    def _write_transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: the write lock is taken before the first read."""
        db = self._get_connection()
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
        db = self._get_connection()
        mode = self._switch_to_wal(db)
        if mode != "wal":
            raise QueueError(
                f"could not switch queue {str(self.path)!r} to WAL journal mode (it is {mode!r}); "
                "put the queue on a local file system"
            )
        if db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION:
            return
        with self._write_transaction() as db:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise QueueError(
                    f"queue {str(self.path)!r} has schema version {version}, newer than this "
                    f"Zephon's {SCHEMA_VERSION}; upgrade Zephon"
                )
            for statement in _SCHEMA:
                db.execute(statement)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    # -- submission ------------------------------------------------------------------------------

    def submit(
        self, spec: dict[str, Any], *, key: str, submitter: str, kind: str = "run"
    ) -> tuple[Job, bool]:
        """Queue ``spec`` under ``key``; ``(job, created)``.

        Idempotent: submitting the same key again with the same spec and kind returns the
        existing job and ``created=False``, whatever its state, so a client may retry
        after a timeout or a crash without queueing twice. Raises ``QueueError`` if the
        key was used for another spec or kind, ``QueueFull`` if the submitter already has
        ``max_queued_per_submitter`` jobs queued, running or preempted.
        """
        _check_name("key", key)
        _check_name("submitter", submitter)
        if kind not in KINDS:
            raise QueueError(f"unknown job kind {kind!r}; use one of {', '.join(KINDS)}")
        if not isinstance(spec, dict):
            raise QueueError(f"spec must be a dict (the experiment), not {type(spec).__name__}")
        spec_text = _to_json("spec", spec)
        spec_hash = hashlib.sha256(spec_text.encode()).hexdigest()
        with self._write_transaction() as db:
            row = db.execute("SELECT * FROM jobs WHERE key = ?", (key,)).fetchone()
            if row is not None:
                if row["spec_hash"] != spec_hash or row["kind"] != kind:
                    raise QueueError(
                        f"key {key!r} was already used for a different spec (job {row['id']}, "
                        f"kind {row['kind']}, spec sha256 {row['spec_hash'][:12]}); "
                        "choose a new key for a new experiment"
                    )
                return _job_from_row(row), False
            pending = db.execute(
                f"SELECT COUNT(*) FROM jobs WHERE submitter = ? AND state IN ({_sql_placeholders(NOT_FINAL)})",
                (submitter, *NOT_FINAL),
            ).fetchone()[0]
            if pending >= self.max_queued_per_submitter:
                raise QueueFull(
                    f"submitter {submitter!r} has {pending} jobs queued, running or preempted, "
                    f"the limit is {self.max_queued_per_submitter}; wait for some to finish "
                    "or cancel some"
                )
            now = time.time()
            job_id = "j-" + secrets.token_hex(6)
            db.execute(
                "INSERT INTO jobs (id, key, submitter, kind, spec, spec_hash, state, created_at,"
                " updated_at) VALUES (?, ?, ?, ?, ?, ?, 'queued', ?, ?)",
                (job_id, key, submitter, kind, spec_text, spec_hash, now, now),
            )
            _insert_event(db, job_id, now, "queued", "")
            return _job_from_row(_fetch_job_row(db, job_id)), True

    # -- reading -----------------------------------------------------------------------------

    def get(self, job_id: str) -> Job:
        """The job ``job_id``; ``QueueError`` if there is none."""
        return _job_from_row(_fetch_job_row(self._get_connection(), job_id))

    def find(self, key: str) -> Job | None:
        """The job submitted under ``key``, or None."""
        row = self._get_connection().execute("SELECT * FROM jobs WHERE key = ?", (key,)).fetchone()
        return None if row is None else _job_from_row(row)

    def list(
        self,
        *,
        states: Iterable[str] | None = None,
        submitter: str | None = None,
        kind: str | None = None,
        limit: int = 1000,
        offset: int = 0,
    ) -> list[Job]:
        """Jobs matching every filter given, oldest first (by creation time, then id)."""
        where, params = [], []
        if states is not None:
            wanted = _check_states("states", states)
            where.append(f"state IN ({_sql_placeholders(wanted)})")
            params.extend(wanted)
        if submitter is not None:
            where.append("submitter = ?")
            params.append(submitter)
        if kind is not None:
            if kind not in KINDS:
                raise QueueError(f"unknown job kind {kind!r}; use one of {', '.join(KINDS)}")
            where.append("kind = ?")
            params.append(kind)
        for name, value in (("limit", limit), ("offset", offset)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise QueueError(f"{name} must be an integer >= 0, not {value!r}")
        sql = "SELECT * FROM jobs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_at, id LIMIT ? OFFSET ?"
        rows = self._get_connection().execute(sql, (*params, limit, offset)).fetchall()
        return [_job_from_row(row) for row in rows]

    def pending(self) -> list[Job]:
        """Queued and preempted jobs, oldest first: the scheduler's to-do list."""
        rows = self._get_connection().execute(
            "SELECT * FROM jobs WHERE state IN ('queued', 'preempted') ORDER BY created_at, id"
        )
        return [_job_from_row(row) for row in rows.fetchall()]

    def events(self, job_id: str) -> list[Event]:
        """The state changes of ``job_id``, in order; ``QueueError`` if there is no such job."""
        db = self._get_connection()
        rows = db.execute(
            "SELECT job_id, at, state, detail FROM events WHERE job_id = ? ORDER BY seq",
            (job_id,),
        ).fetchall()
        if not rows:
            _fetch_job_row(db, job_id)  # every job has its "queued" event: none means no such job
        return [Event(*row) for row in rows]

    def counts(self) -> dict[str, int]:
        """State -> number of jobs in it, for every state (0 included)."""
        rows = (
            self._get_connection()
            .execute("SELECT state, COUNT(*) FROM jobs GROUP BY state")
            .fetchall()
        )
        found = dict(rows)
        return {state: found.get(state, 0) for state in STATES}

    # -- changes -----------------------------------------------------------------------------

    def transition(
        self,
        job_id: str,
        to: str,
        *,
        expect: Iterable[str] | None = None,
        detail: str = "",
        **fields: Any,
    ) -> Job:
        """Move ``job_id`` to state ``to`` (atomic compare-and-set); the updated job.

        ``expect``: the states the caller believes the job is in; if it is in another one
        (someone else moved it), ``TransitionError`` and nothing changes. ``fields`` sets
        ``run_folder``, ``mlflow_run_id``, ``pid``, ``result`` or ``error`` with the same
        commit; ``dp`` (only when going to running) is appended to ``dp_sizes``. Going to
        running counts an attempt. The change is recorded as an event with ``detail``.
        """
        if to not in STATES:
            raise QueueError(f"unknown state {to!r}; states are {', '.join(STATES)}")
        expected = None if expect is None else _check_states("expect", expect)
        dp = fields.pop("dp", None)
        if dp is not None:
            if to != "running":
                raise QueueError(
                    f"dp is the size of a new attempt; give it when moving job {job_id} to "
                    f"running, not to {to}"
                )
            if isinstance(dp, bool) or not isinstance(dp, int) or dp < 1:
                raise QueueError(f"dp must be a positive integer, not {dp!r}")
        values = _field_values(fields)
        if not isinstance(detail, str):
            raise QueueError(f"detail must be a string, not {type(detail).__name__}")
        with self._write_transaction() as db:
            row = _fetch_job_row(db, job_id)
            current = row["state"]
            if expected is not None and current not in expected:
                raise TransitionError(
                    f"job {job_id} is {current}, not {' or '.join(expected)} as expected; "
                    "someone else changed it: read it again"
                )
            if to not in TRANSITIONS.get(current, set()):
                raise TransitionError(
                    f"job {job_id} is {current}; cannot go to {to} "
                    f"(allowed: {', '.join(sorted(TRANSITIONS.get(current, ()))) or 'none, it is final'})"
                )
            if to == "preempted" and row["cancel_requested"]:
                raise TransitionError(
                    f"job {job_id} has a cancel request; cannot go to preempted (it would be "
                    "started again): move it to cancelled"
                )
            now = time.time()
            values.update(state=to, updated_at=now)
            if to == "running":
                values["attempts"] = row["attempts"] + 1
                if dp is not None:
                    values["dp_sizes"] = json.dumps([*json.loads(row["dp_sizes"]), dp])
            _update_job_columns(db, job_id, values)
            _insert_event(db, job_id, now, to, detail)
            return _job_from_row(_fetch_job_row(db, job_id))

    def update(self, job_id: str, **fields: Any) -> Job:
        """Set ``run_folder``, ``mlflow_run_id``, ``pid``, ``result`` or ``error`` of
        ``job_id`` without a state change (no event); the updated job."""
        values = _field_values(fields)
        with self._write_transaction() as db:
            _fetch_job_row(db, job_id)
            if values:
                _update_job_columns(db, job_id, {**values, "updated_at": time.time()})
            return _job_from_row(_fetch_job_row(db, job_id))

    def request_cancel(self, job_id: str) -> Job:
        """Cancel ``job_id``; the updated job.

        Queued or preempted: cancelled at once. Running: ``cancel_requested`` is set and
        the scheduler, which owns the process, stops it and moves the job to cancelled.
        Already final (or already requested): returned unchanged.
        """
        with self._write_transaction() as db:
            row = _fetch_job_row(db, job_id)
            if row["state"] in ("queued", "preempted"):
                now = time.time()
                _update_job_columns(db, job_id, {"state": "cancelled", "updated_at": now})
                _insert_event(db, job_id, now, "cancelled", "cancel requested")
                return _job_from_row(_fetch_job_row(db, job_id))
            if row["state"] == "running" and not row["cancel_requested"]:
                _update_job_columns(db, job_id, {"cancel_requested": 1, "updated_at": time.time()})
                return _job_from_row(_fetch_job_row(db, job_id))
            return _job_from_row(row)


# -- helpers -----------------------------------------------------------------------------------


def _check_name(what: str, value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise QueueError(f"{what} must be a non-empty string, not {value!r}")
    if len(value) > MAX_NAME_LEN:
        raise QueueError(f"{what} is {len(value)} characters long; use at most {MAX_NAME_LEN}")
    if not value.isprintable():
        raise QueueError(f"{what} {value!r} has unprintable characters; use printable ones only")


def _check_states(what: str, states: Iterable[str]) -> tuple[str, ...]:
    if isinstance(states, str):
        raise QueueError(f"{what} must be a collection of states, not the string {states!r}")
    wanted = tuple(states)
    unknown = [s for s in wanted if s not in STATES]
    if unknown:
        raise QueueError(f"unknown state(s) {unknown} in {what}; states are {', '.join(STATES)}")
    return wanted


def _to_json(what: str, value: Any) -> str:
    try:
        return canonical_json(value)
    except (TypeError, ValueError) as e:
        raise QueueError(
            f"{what} is not JSON-serialisable ({e}); use dicts, lists, strings, finite "
            "numbers, booleans and None"
        ) from e


def _field_values(fields: dict[str, Any]) -> dict[str, Any]:
    """Checked ``fields`` as column -> stored value."""
    unknown = sorted(set(fields) - set(FIELDS))
    if unknown:
        raise QueueError(
            f"unknown job field(s) {', '.join(unknown)}; settable fields are {', '.join(FIELDS)}"
            " (and dp, when moving to running)"
        )
    values: dict[str, Any] = {}
    for name, value in fields.items():
        types, described = FIELDS[name]
        if value is not None and (not isinstance(value, types) or isinstance(value, bool)):
            raise QueueError(f"{name} must be {described} or None, not {type(value).__name__}")
        if name == "run_folder" and value is not None:
            value = os.fspath(value)
        elif name == "result" and value is not None:
            value = _to_json("result", value)
        values[name] = value
    return values


def _sql_placeholders(values: tuple[str, ...]) -> str:
    return ", ".join("?" * len(values))


def _fetch_job_row(db: sqlite3.Connection, job_id: str) -> sqlite3.Row:
    row = db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
    if row is None:
        raise QueueError(f"no job {job_id!r} in the queue; list the jobs to find its id")
    return row


def _update_job_columns(db: sqlite3.Connection, job_id: str, values: dict[str, Any]) -> None:
    # Column names come from FIELDS and this module, never from the caller's strings.
    columns = ", ".join(f"{name} = ?" for name in values)
    db.execute(f"UPDATE jobs SET {columns} WHERE id = ?", (*values.values(), job_id))


def _insert_event(db: sqlite3.Connection, job_id: str, at: float, state: str, detail: str) -> None:
    db.execute(
        "INSERT INTO events (job_id, at, state, detail) VALUES (?, ?, ?, ?)",
        (job_id, at, state, detail),
    )


def _job_from_row(row: sqlite3.Row) -> Job:
    return Job(
        id=row["id"],
        key=row["key"],
        submitter=row["submitter"],
        kind=row["kind"],
        spec=json.loads(row["spec"]),
        spec_hash=row["spec_hash"],
        state=row["state"],
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
    )
