"""MLflow's run statuses, and the one each way a Zephon run ends maps to."""

from __future__ import annotations

from enum import StrEnum

from orchestrator.experiment.run_record import RunStatus


class MlflowStatus(StrEnum):
    """The status of an MLflow run (``run.info.status``), as MLflow names it."""

    RUNNING = "RUNNING"
    SCHEDULED = "SCHEDULED"
    FINISHED = "FINISHED"
    FAILED = "FAILED"
    KILLED = "KILLED"
    """Stopped before its end: interrupted."""


ENDED = frozenset({MlflowStatus.FINISHED, MlflowStatus.FAILED, MlflowStatus.KILLED})
"""The statuses a run can be ended with."""
MLFLOW_STATUS = {
    RunStatus.SUCCEEDED: MlflowStatus.FINISHED,
    RunStatus.FAILED: MlflowStatus.FAILED,
    RunStatus.INTERRUPTED: MlflowStatus.KILLED,
}
"""A run folder's final status -> the status its MLflow run ends with."""
