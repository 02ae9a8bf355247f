"""The job queue: durable, idempotent submission of experiments to the scheduler.

One SQLite file (WAL, :mod:`.queue_database`) that survives restarts and needs no server;
it imports only the standard library, the error classes, the job's records (:mod:`.job`)
and the budgets (:mod:`.budget`). Every change is one ``BEGIN IMMEDIATE``
transaction, so the checks deciding it and the change see no other writer, in any
process or thread. Keep the file on a local file system (not NFS).

Design: docs/design/orchestrator_service.md
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from orchestrator.errors import QueueError, QueueFull, TransitionError
from orchestrator.service.daily_budgets import Budgets, Usage, check_budget, usage
from orchestrator.service.job import (
    NOT_FINAL,
    PENDING,
    TRANSITIONS,
    Event,
    Job,
    JobKind,
    JobState,
    to_kind,
    to_state,
)
from orchestrator.service.queue_database import (
    QueueDatabase,
    end_attempt,
    event_from_row,
    fetch_job_row,
    insert_event,
    job_from_row,
    start_attempt,
    update_job_columns,
)

MAX_NAME_LEN = 200
"""Longest key or submitter."""
FIELDS: dict[str, tuple[tuple[type, ...], str]] = {
    "run_folder": ((str, os.PathLike), "a path"),
    "mlflow_run_id": ((str,), "a string"),
    "pid": ((int,), "an integer"),
    "result": ((dict,), "a dict"),
    "error": ((str,), "a string"),
    "slurm_job_id": ((str,), "a string"),
    "slurm_state": ((str,), "a string"),
}
"""Job fields ``transition`` and ``update`` may set, their types and how to name them
(``transition`` also takes ``dp``)."""


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
        self,
        path: str | os.PathLike[str],
        *,
        max_queued_per_submitter: int = 1000,
        budgets: Budgets | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``budgets``: the daily budgets submissions are checked against (None: none);
        ``clock``: the time of every change and of the budgets' day (tests set it)."""
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
        self.max_queued_per_submitter = max_queued_per_submitter
        self.budgets = budgets or Budgets()
        self._clock = clock
        self._database = QueueDatabase(path)

    def __repr__(self) -> str:
        return f"JobQueue({str(self.path)!r})"

    @property
    def path(self) -> Path:
        """The queue's SQLite file."""
        return self._database.path

    def close(self) -> None:
        """Close the calling thread's connection (the next call opens a new one)."""
        self._database.close()

    # -- submission ------------------------------------------------------------------------------

    def submit(
        self,
        spec: dict[str, Any],
        *,
        key: str,
        submitter: str,
        kind: JobKind | str = JobKind.RUN,
    ) -> tuple[Job, bool]:
        """Queue ``spec`` under ``key``; ``(job, created)``.

        Idempotent: submitting the same key again with the same spec and kind returns the
        existing job and ``created=False``, whatever its state, so a client may retry
        after a timeout or a crash without queueing twice. Raises ``QueueError`` if the
        key was used for another spec or kind, ``QueueFull`` if the submitter already has
        ``max_queued_per_submitter`` jobs queued, running or preempted, ``OverBudget`` if
        it used up its daily budget (:mod:`.budget`; a ``plan`` job is free).
        """
        check_name("key", key)
        check_name("submitter", submitter)
        kind = to_kind(kind)
        if not isinstance(spec, dict):
            raise QueueError(f"spec must be a dict (the experiment), not {type(spec).__name__}")
        spec_text = _to_json("spec", spec)
        spec_hash = hashlib.sha256(spec_text.encode()).hexdigest()
        with self._database.write_transaction() as db:
            row = db.execute("SELECT * FROM jobs WHERE key = ?", (key,)).fetchone()
            if row is not None:
                if row["spec_hash"] != spec_hash or row["kind"] != kind:
                    raise QueueError(
                        f"key {key!r} was already used for a different spec (job {row['id']}, "
                        f"kind {row['kind']}, spec sha256 {row['spec_hash'][:12]}); "
                        "choose a new key for a new experiment"
                    )
                return job_from_row(row), False
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
            now = self._clock()
            check_budget(db, self.budgets, submitter=submitter, kind=kind, now=now)
            job_id = "j-" + secrets.token_hex(6)
            db.execute(
                "INSERT INTO jobs (id, key, submitter, kind, spec, spec_hash, state, created_at,"
                " updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (job_id, key, submitter, kind, spec_text, spec_hash, JobState.QUEUED, now, now),
            )
            insert_event(db, job_id, at=now, state=JobState.QUEUED, detail="")
            return job_from_row(fetch_job_row(db, job_id)), True

    # -- reading -----------------------------------------------------------------------------

    def get(self, job_id: str) -> Job:
        """The job ``job_id``; ``QueueError`` if there is none."""
        return job_from_row(fetch_job_row(self._database.connection(), job_id))

    def find(self, key: str) -> Job | None:
        """The job submitted under ``key``, or None."""
        row = (
            self._database.connection()
            .execute("SELECT * FROM jobs WHERE key = ?", (key,))
            .fetchone()
        )
        return None if row is None else job_from_row(row)

    def list(
        self,
        *,
        states: Iterable[JobState | str] | None = None,
        submitter: str | None = None,
        kind: JobKind | str | None = None,
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
            where.append("kind = ?")
            params.append(to_kind(kind))
        for name, value in (("limit", limit), ("offset", offset)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise QueueError(f"{name} must be an integer >= 0, not {value!r}")
        sql = "SELECT * FROM jobs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_at, id LIMIT ? OFFSET ?"
        rows = self._database.connection().execute(sql, (*params, limit, offset)).fetchall()
        return [job_from_row(row) for row in rows]

    def pending(self) -> list[Job]:
        """Queued and preempted jobs, oldest first: the scheduler's to-do list."""
        rows = self._database.connection().execute(
            f"SELECT * FROM jobs WHERE state IN ({_sql_placeholders(PENDING)})"
            " ORDER BY created_at, id",
            PENDING,
        )
        return [job_from_row(row) for row in rows.fetchall()]

    def events(self, job_id: str) -> list[Event]:
        """The state changes of ``job_id``, in order; ``QueueError`` if there is no such job."""
        db = self._database.connection()
        rows = db.execute(
            "SELECT job_id, at, state, detail FROM events WHERE job_id = ? ORDER BY seq",
            (job_id,),
        ).fetchall()
        if not rows:
            fetch_job_row(db, job_id)  # every job has its "queued" event: none means no such job
        return [event_from_row(row) for row in rows]

    def counts(self) -> dict[JobState, int]:
        """State -> number of jobs in it, for every state (0 included)."""
        rows = (
            self._database.connection()
            .execute("SELECT state, COUNT(*) FROM jobs GROUP BY state")
            .fetchall()
        )
        found = dict(rows)
        return {state: found.get(state, 0) for state in JobState}

    def usage(self, submitter: str | None = None) -> list[Usage]:
        """Today's budget usage of ``submitter``, or of every submitter who used anything
        today or has a budget of its own (:func:`.budget.usage`)."""
        return usage(
            self._database.connection(), self.budgets, now=self._clock(), submitter=submitter
        )

    # -- changes -----------------------------------------------------------------------------

    def transition(
        self,
        job_id: str,
        to: JobState | str,
        *,
        expect: Iterable[JobState | str] | None = None,
        detail: str = "",
        **fields: Any,
    ) -> Job:
        """Move ``job_id`` to state ``to`` (atomic compare-and-set); the updated job.

        ``expect``: the states the caller believes the job is in; if it is in another one
        (someone else moved it), ``TransitionError`` and nothing changes. ``fields`` sets
        ``run_folder``, ``mlflow_run_id``, ``pid``, ``result`` or ``error`` with the same
        commit; ``dp`` (only when going to running) is appended to ``dp_sizes``. Going to
        running counts an attempt, on ``devices`` devices (only then; default ``dp``, or 0),
        for the device-hours of budgets. The change is recorded as an event with ``detail``.
        """
        to = to_state(to)
        expected = None if expect is None else _check_states("expect", expect)
        dp = fields.pop("dp", None)
        if dp is not None:
            if to != JobState.RUNNING:
                raise QueueError(
                    f"dp is the size of a new attempt; give it when moving job {job_id} to "
                    f"running, not to {to}"
                )
            if isinstance(dp, bool) or not isinstance(dp, int) or dp < 1:
                raise QueueError(f"dp must be a positive integer, not {dp!r}")
        devices = fields.pop("devices", dp or 0)
        if isinstance(devices, bool) or not isinstance(devices, int) or devices < 0:
            raise QueueError(f"devices must be an integer >= 0, not {devices!r}")
        if devices and to != JobState.RUNNING:
            raise QueueError(
                f"devices are leased to a new attempt; give them when moving job {job_id} to "
                f"running, not to {to}"
            )
        values = _field_values(fields)
        if not isinstance(detail, str):
            raise QueueError(f"detail must be a string, not {type(detail).__name__}")
        with self._database.write_transaction() as db:
            row = fetch_job_row(db, job_id)
            current = JobState(row["state"])
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
            if to == JobState.PREEMPTED and row["cancel_requested"]:
                raise TransitionError(
                    f"job {job_id} has a cancel request; cannot go to preempted (it would be "
                    "started again): move it to cancelled"
                )
            now = self._clock()
            values.update(state=to, updated_at=now)
            if current == JobState.RUNNING:
                end_attempt(db, job_id, at=now)
            if to == JobState.RUNNING:
                start_attempt(db, row, at=now, devices=devices)
                values["attempts"] = row["attempts"] + 1
                if dp is not None:
                    values["dp_sizes"] = json.dumps([*json.loads(row["dp_sizes"]), dp])
            update_job_columns(db, job_id, values)
            insert_event(db, job_id, at=now, state=to, detail=detail)
            return job_from_row(fetch_job_row(db, job_id))

    def update(self, job_id: str, **fields: Any) -> Job:
        """Set ``run_folder``, ``mlflow_run_id``, ``pid``, ``result`` or ``error`` of
        ``job_id`` without a state change (no event); the updated job."""
        values = _field_values(fields)
        with self._database.write_transaction() as db:
            fetch_job_row(db, job_id)
            if values:
                update_job_columns(db, job_id, {**values, "updated_at": self._clock()})
            return job_from_row(fetch_job_row(db, job_id))

    def request_cancel(self, job_id: str) -> Job:
        """Cancel ``job_id``; the updated job.

        Queued or preempted: cancelled at once. Running: ``cancel_requested`` is set and
        the scheduler, which owns the process, stops it and moves the job to cancelled.
        Already final (or already requested): returned unchanged.
        """
        with self._database.write_transaction() as db:
            row = fetch_job_row(db, job_id)
            if row["state"] in PENDING:
                now = self._clock()
                cancelled = {"state": JobState.CANCELLED, "updated_at": now}
                update_job_columns(db, job_id, cancelled)
                insert_event(
                    db, job_id, at=now, state=JobState.CANCELLED, detail="cancel requested"
                )
                return job_from_row(fetch_job_row(db, job_id))
            if row["state"] == JobState.RUNNING and not row["cancel_requested"]:
                update_job_columns(db, job_id, {"cancel_requested": 1, "updated_at": self._clock()})
                return job_from_row(fetch_job_row(db, job_id))
            return job_from_row(row)


# -- helpers -----------------------------------------------------------------------------------


def check_name(what: str, value: Any) -> None:
    """QueueError unless ``value`` can name a job's ``what`` (its key, its submitter): a
    non-empty printable string of at most ``MAX_NAME_LEN`` characters."""
    if not isinstance(value, str) or not value:
        raise QueueError(f"{what} must be a non-empty string, not {value!r}")
    if len(value) > MAX_NAME_LEN:
        raise QueueError(f"{what} is {len(value)} characters long; use at most {MAX_NAME_LEN}")
    if not value.isprintable():
        raise QueueError(f"{what} {value!r} has unprintable characters; use printable ones only")


def _check_states(what: str, states: Iterable[JobState | str]) -> tuple[JobState, ...]:
    if isinstance(states, str):
        raise QueueError(f"{what} must be a collection of states, not the string {states!r}")
    wanted = tuple(states)
    unknown = [s for s in wanted if s not in list(JobState)]
    if unknown:
        raise QueueError(f"unknown state(s) {unknown} in {what}; states are {', '.join(JobState)}")
    return tuple(JobState(s) for s in wanted)


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


def _sql_placeholders(values: tuple[JobState, ...]) -> str:
    return ", ".join("?" * len(values))
