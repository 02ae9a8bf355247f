"""A job of the job service: its kinds, its states and their machine, and its records.

Standard library and the error classes only, like the queue that stores them.

Design: docs/design/orchestrator_service.md
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from orchestrator.errors import QueueError


class JobKind(StrEnum):
    """What a job does (stored in the queue as its value)."""

    RUN = "run"
    """Train the experiment."""
    PLAN = "plan"
    """Dry-run it: the plan and its fingerprints, logged as an MLflow run."""
    VERIFY = "verify"
    """Check elasticity: train, resume on another dp, compare the digests."""


class JobState(StrEnum):
    """Where a job is in its life (stored in the queue as its value)."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    PREEMPTED = "preempted"
    """Its attempt stopped before the end (process died, scheduler stopped it): to start again."""


KINDS = tuple(kind.value for kind in JobKind)
"""The kinds' names, for command-line choices."""
FINAL = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})
"""States a job never leaves."""
PENDING = (JobState.QUEUED, JobState.PREEMPTED)
"""States of a job waiting for the scheduler to start it."""
NOT_FINAL = tuple(state for state in JobState if state not in FINAL)
"""States that count against a submitter's limit: queued, running, preempted."""
TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.QUEUED: frozenset({JobState.RUNNING, JobState.CANCELLED}),
    JobState.RUNNING: frozenset(
        {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.PREEMPTED}
    ),
    JobState.PREEMPTED: frozenset({JobState.RUNNING, JobState.CANCELLED}),
}
"""Allowed state changes; final states have none."""


def to_state(value: Any) -> JobState:
    """``value`` (a state or its name) as a :class:`JobState`; QueueError naming the states
    if it is none."""
    try:
        return JobState(value)
    except ValueError:
        raise QueueError(f"unknown state {value!r}; states are {', '.join(JobState)}") from None


def to_kind(value: Any) -> JobKind:
    """``value`` (a kind or its name) as a :class:`JobKind`; QueueError naming the kinds if
    it is none."""
    try:
        return JobKind(value)
    except ValueError:
        raise QueueError(f"unknown job kind {value!r}; use one of {', '.join(KINDS)}") from None


@dataclass(frozen=True, kw_only=True)
class Job:
    """One submitted experiment, as stored in the queue."""

    id: str
    """``"j-"`` + 12 random hex digits."""
    key: str
    """The client's idempotency key (unique in the queue)."""
    submitter: str
    """Who submitted it (the per-submitter limit counts by this)."""
    kind: JobKind
    """What it does: train, plan or verify."""
    spec: dict[str, Any]
    """The experiment, as its canonical JSON read back."""
    spec_hash: str
    """SHA-256 of the canonical JSON of ``spec`` (sorted keys, compact separators)."""
    state: JobState
    """Where it is: queued, running, succeeded, failed, cancelled or preempted."""
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
    slurm_job_id: str | None = None
    """The Slurm job of the current (or last) attempt, on a service with the Slurm launcher."""
    slurm_state: str | None = None
    """That Slurm job's state as last polled (PENDING, RUNNING, REQUEUED, COMPLETED, ...)."""

    def to_dict(self) -> dict[str, Any]:
        """The job as plain JSON-able data (its kind and state as plain strings)."""
        return {**asdict(self), "kind": self.kind.value, "state": self.state.value}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Job:
        """The job :meth:`to_dict` gave; QueueError naming a bad kind or state."""
        return cls(**{**data, "kind": to_kind(data["kind"]), "state": to_state(data["state"])})


@dataclass(frozen=True)
class Event:
    """One state change of a job."""

    job_id: str
    """The job that changed."""
    at: float
    """When (``time.time()``)."""
    state: JobState
    """The state it went to."""
    detail: str
    """The caller's note ("" if none)."""

    def to_dict(self) -> dict[str, Any]:
        """The event as plain JSON-able data (its state as a plain string)."""
        return {**asdict(self), "state": self.state.value}
