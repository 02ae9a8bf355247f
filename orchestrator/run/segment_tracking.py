"""A training segment's tracking: best effort while it trains, the run folder being the record.

MLflow mirrors the run folder (:class:`SegmentTracking`); a server that is unreachable leaves
the records pending, and the run says how to catch up (``zephon sync``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import StrEnum

from orchestrator.errors import TrackingError
from orchestrator.experiment.run_record import RunStatus
from orchestrator.tracking.mirrored_run import MirroredRun
from orchestrator.tracking.tracker import Tracker

SYNC_EVERY_S = 10.0
"""Seconds between two syncs of a training run's records to its tracking server."""


class TrackingState(StrEnum):
    """Where a run's records stand with its tracking server."""

    OFF = "off"
    """Not tracked."""
    SYNCED = "synced"
    """MLflow holds everything the run folder holds."""
    PENDING = "pending"
    """The server was unreachable: ``zephon sync <folder>`` sends what it lacks."""


@dataclass
class SegmentTracking:
    """A segment's tracking: its tracker (None: not tracked), its state, its messages. A
    tracker whose server was unreachable at the start is kept: each later sync tries again,
    and the first that reaches the server creates the MLflow run."""

    tracker: Tracker | None
    state: TrackingState
    messages: list[str] = field(default_factory=list)
    last_sync: float = field(default_factory=time.monotonic)

    @classmethod
    def start(cls, tracker: Tracker | None, run: MirroredRun, offline_ok: bool) -> SegmentTracking:
        """Open the run's MLflow run (tags and parent from its records, as ``zephon sync``
        does); an unreachable server leaves the records pending and training goes on."""
        if tracker is None:
            return cls(None, TrackingState.PENDING if offline_ok else TrackingState.OFF)
        try:
            tracker.start(run)
        except TrackingError as e:
            # kept: start recorded where the run goes, so a later sync creates it
            message = f"tracking unavailable, training continues: {e}"
            return cls(tracker, TrackingState.PENDING, [message])
        return cls(tracker, TrackingState.SYNCED)

    def sync_now_and_then(self, run: MirroredRun) -> None:
        """Send the run's new records if ``SYNC_EVERY_S`` passed since the last time."""
        if self.tracker is None or time.monotonic() - self.last_sync < SYNC_EVERY_S:
            return
        self.last_sync = time.monotonic()
        try:
            self.tracker.sync(run)
            self.state = TrackingState.SYNCED
        except TrackingError as e:
            if self.state != TrackingState.PENDING:
                self.messages.append(
                    f"tracking unavailable, metrics kept in {run.folder.path}: {e}"
                )
            self.state = TrackingState.PENDING

    def finish(self, run: MirroredRun, status: RunStatus) -> None:
        """Send the rest and end the MLflow run with ``status``; say how to catch up if not."""
        if self.tracker is not None:
            try:
                self.tracker.finish(run, status)
                self.state = TrackingState.SYNCED
            except TrackingError as e:
                self.state = TrackingState.PENDING
                self.messages.append(f"tracking unavailable: {e}")
        if self.state == TrackingState.PENDING:
            self.messages.append(
                f"metrics are kept in {run.folder.path}; "
                f"send them with `zephon sync {run.folder.path}`"
            )
