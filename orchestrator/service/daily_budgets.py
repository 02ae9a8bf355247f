"""Budgets per submitter and day: runs and device-hours, what each submitter used of them.

A day is a UTC calendar day: usage counts from 00:00 UTC and a budget renews at the next
00:00 UTC. Runs are the ``run`` and ``verify`` jobs a submitter had admitted that day, in
whatever state (``plan`` jobs, dry runs, are free). Device-hours are the devices leased to
each attempt times the hours it ran within the day, running attempts up to now. Both are
indexed SQL aggregates over the day's rows of the queue file, so their cost does not grow
with the jobs stored. Standard library and the error classes only, like the queue.

Design: docs/design/orchestrator_service.md
"""

from __future__ import annotations

import datetime
import math
import sqlite3
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from orchestrator.errors import OverBudget, QueueError
from orchestrator.service.job import JobKind

DAY_S = 24 * 3600


@dataclass(frozen=True, kw_only=True)
class Budget:
    """What one submitter may use per UTC day; None: no limit."""

    runs_per_day: int | None = None
    """``run`` and ``verify`` jobs admitted per day (``plan`` jobs are free)."""
    device_hours_per_day: float | None = None
    """Devices leased x hours their attempts ran, per day."""

    def __post_init__(self) -> None:
        runs, hours = self.runs_per_day, self.device_hours_per_day
        if runs is not None and (isinstance(runs, bool) or not isinstance(runs, int) or runs < 0):
            raise QueueError(f"runs_per_day must be an integer >= 0 or None, not {runs!r}")
        if hours is not None and (
            isinstance(hours, bool) or not isinstance(hours, int | float) or not hours >= 0
        ):
            raise QueueError(f"device_hours_per_day must be a number >= 0 or None, not {hours!r}")


@dataclass(frozen=True, kw_only=True)
class Budgets:
    """The service's budgets: ``default`` for every submitter, ``users`` overriding it per OS
    user (a user's entry replaces the default whole: ``{}`` there means no limit)."""

    default: Budget = field(default_factory=Budget)
    users: Mapping[str, Budget] = field(default_factory=dict)

    def of(self, submitter: str) -> Budget:
        """The budget of ``submitter``."""
        return self.users.get(submitter, self.default)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Budgets:
        """Budgets from ``{"default": {...}, "users": {name: {...}}}`` (service.json, a
        ``--budgets`` file); QueueError naming a key it does not know."""
        unknown = set(data) - {"default", "users"}
        if unknown:
            raise QueueError(f"budgets: unknown keys {sorted(unknown)}; use default and users")
        users = data.get("users") or {}
        if not isinstance(users, Mapping):
            raise QueueError(f"budgets.users must map OS user names to budgets, not {users!r}")
        return cls(
            default=_budget_from_dict("budgets.default", data.get("default") or {}),
            users={
                name: _budget_from_dict(f"budgets.users.{name}", value or {})
                for name, value in users.items()
            },
        )

    def to_dict(self) -> dict[str, Any]:
        """The budgets as plain JSON-able data (the shape :meth:`from_dict` reads)."""
        return {
            "default": asdict(self.default),
            "users": {u: asdict(b) for u, b in self.users.items()},
        }


def _budget_from_dict(where: str, data: Any) -> Budget:
    if not isinstance(data, Mapping):
        raise QueueError(
            f"{where} must be an object of runs_per_day and device_hours_per_day, not {data!r}"
        )
    unknown = set(data) - {"runs_per_day", "device_hours_per_day"}
    if unknown:
        raise QueueError(
            f"{where}: unknown keys {sorted(unknown)}; use runs_per_day and device_hours_per_day"
        )
    return Budget(**data)


@dataclass(frozen=True)
class Usage:
    """What a submitter used of its budget in the current UTC day."""

    submitter: str
    budget: Budget
    runs: int
    """``run`` and ``verify`` jobs admitted today."""
    device_hours: float
    """Device-hours of today's attempts (running ones up to now)."""
    renews_at: float
    """When the budget renews: the next 00:00 UTC (``time.time()`` scale)."""

    @property
    def runs_left(self) -> int | None:
        limit = self.budget.runs_per_day
        return None if limit is None else max(0, limit - self.runs)

    @property
    def device_hours_left(self) -> float | None:
        limit = self.budget.device_hours_per_day
        return None if limit is None else max(0.0, limit - self.device_hours)

    def exhausted(self) -> list[str]:
        """The limits used up (``runs``, ``device_hours``); a new run is refused if any."""
        return [
            name
            for name, left in (("runs", self.runs_left), ("device_hours", self.device_hours_left))
            if left is not None and left <= 0
        ]

    def to_dict(self) -> dict[str, Any]:
        """Used, limit and left of each limit, and when they renew (ISO 8601, UTC)."""
        return {
            "submitter": self.submitter,
            "runs": {
                "used": self.runs,
                "limit": self.budget.runs_per_day,
                "left": self.runs_left,
            },
            "device_hours": {
                "used": round(self.device_hours, 4),
                "limit": self.budget.device_hours_per_day,
                "left": None
                if self.device_hours_left is None
                else round(self.device_hours_left, 4),
            },
            "renews_at": _iso(self.renews_at),
        }

    def refusal(self) -> OverBudget:
        """The error that refuses a new run of this submitter: used, left, renewal."""
        return OverBudget(
            f"submitter {self.submitter!r} is over its daily budget: "
            f"{_describe(self)}; it renews at {_iso(self.renews_at)}. Wait until then, submit "
            "dry runs (kind plan, which are free) meanwhile, or ask the service's operator to "
            "raise the budget (zephon serve --runs-per-day/--device-hours-per-day/--budgets)"
        )


def _describe(usage: Usage) -> str:
    parts = []
    if usage.budget.runs_per_day is not None:
        parts.append(
            f"runs today {usage.runs} of {usage.budget.runs_per_day} ({usage.runs_left} left)"
        )
    if usage.budget.device_hours_per_day is not None:
        parts.append(
            f"device-hours today {usage.device_hours:.2f} of "
            f"{usage.budget.device_hours_per_day:g} ({usage.device_hours_left:.2f} left)"
        )
    return "; ".join(parts)


def _iso(timestamp: float) -> str:
    return (
        datetime.datetime.fromtimestamp(timestamp, datetime.UTC).isoformat().replace("+00:00", "Z")
    )


def day_window(now: float) -> tuple[float, float]:
    """The UTC day holding ``now``: (its 00:00, the next 00:00), as ``time.time()`` values."""
    start = math.floor(now / DAY_S) * DAY_S  # POSIX time has no leap seconds: days are equal
    return float(start), float(start + DAY_S)


FREE_KINDS = (JobKind.PLAN,)
"""Job kinds that do not count against the run budget."""

RUNS_SQL = f"""
    SELECT submitter, COUNT(*) FROM jobs
    WHERE created_at >= :start AND created_at < :end
      AND kind NOT IN ({", ".join(f"'{k}'" for k in FREE_KINDS)}) {{submitter}}
    GROUP BY submitter"""
# An attempt counts for the part of it inside the day; ended_at IS NULL: still running.
DEVICE_HOURS_SQL = """
    SELECT submitter,
           SUM(devices * MAX(0, MIN(COALESCE(ended_at, :now), :now) - MAX(started_at, :start)))
           / 3600.0
    FROM attempts
    WHERE (ended_at IS NULL OR ended_at > :start) {submitter}
    GROUP BY submitter"""


def usage(
    db: sqlite3.Connection, budgets: Budgets, *, now: float, submitter: str | None = None
) -> list[Usage]:
    """Today's usage of ``submitter``, or of every submitter who used anything today or
    has a budget of its own, by name; two indexed aggregates (``jobs_by_created``,
    ``attempts_by_end``), whatever the number of jobs stored."""
    start, end = day_window(now)
    params = {"start": start, "end": end, "now": now, "submitter": submitter}
    only = "" if submitter is None else "AND submitter = :submitter"
    runs = dict(db.execute(RUNS_SQL.format(submitter=only), params).fetchall())
    hours = dict(db.execute(DEVICE_HOURS_SQL.format(submitter=only), params).fetchall())
    names = {submitter} if submitter is not None else {*runs, *hours, *budgets.users}
    return [
        Usage(name, budgets.of(name), runs.get(name, 0), hours.get(name) or 0.0, end)
        for name in sorted(names)
    ]


def check_budget(
    db: sqlite3.Connection, budgets: Budgets, *, submitter: str, kind: JobKind, now: float
) -> None:
    """Raise :class:`~orchestrator.errors.OverBudget` if ``submitter`` may not queue a new
    job of ``kind`` now (a ``plan`` job always may)."""
    if kind in FREE_KINDS or budgets.of(submitter) == Budget():
        return
    (today,) = usage(db, budgets, now=now, submitter=submitter)
    if today.exhausted():
        raise today.refusal()
