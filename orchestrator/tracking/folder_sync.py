"""``zephon sync``: send what a run folder holds and its tracking lacks (after an outage)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.errors import ExperimentError
from orchestrator.experiment.runfolder import RunFolder
from orchestrator.tracking.tracker import sync_folder


def sync(folder: str | Path | RunFolder) -> dict[str, Any]:
    """Send everything ``folder`` holds that its MLflow run lacks (:func:`sync_folder`): the
    folder, what was sent, and the MLflow run's id."""
    folder = folder if isinstance(folder, RunFolder) else RunFolder(folder)
    if not folder.exists():
        raise ExperimentError([f"{folder.path} is not a run folder (no experiment.json)"])
    return {
        "run_folder": str(folder.path),
        "sent": sync_folder(folder),
        "mlflow_run_id": folder.state().mlflow_run_id,
    }
