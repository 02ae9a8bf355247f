"""What a run left (:class:`RunResult`), read from its run folder, and how to call Zephon again."""

from __future__ import annotations

import shutil
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.experiment.runfolder import RunFolder
from orchestrator.run.segment_tracking import TrackingState


@dataclass
class RunResult:
    """What a finished (or failed) run left: status, fingerprints, scores, tracking."""

    run_name: str
    folder: str
    status: str
    returncode: int
    dp_sizes: list[int]
    steps: int
    data_fingerprint: str | None
    contract_fingerprint: str
    variant: str
    recipe_fingerprint: str | None
    eval: dict[str, Any] | None
    mlflow_run_id: str | None
    tracking: str
    """``synced``, ``pending`` (run ``zephon sync``) or ``off`` (:class:`TrackingState`)."""
    messages: list[str] = field(default_factory=list)
    answered_from: str | None = None
    """The run folder's name of the earlier run of the same experiment this result comes
    from (:mod:`orchestrator.run.identity_index`); None when this call trained its own run."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def zephon_command() -> list[str]:
    """How to call the ``zephon`` CLI of this installation (for the commands Zephon prints)."""
    beside = Path(sys.executable).parent / "zephon"
    found = shutil.which("zephon")
    if found and (not beside.exists() or Path(found).resolve() == beside.resolve()):
        return ["zephon"]
    return [str(beside)] if beside.exists() else [sys.executable, "-m", "orchestrator.cli"]


def run_result(
    folder: RunFolder, code: int, tracking: TrackingState, messages: list[str]
) -> RunResult:
    """The :class:`RunResult` of ``folder`` as it stands."""
    state = folder.state()
    experiment = folder.experiment()
    evals = folder.evals()
    return RunResult(
        run_name=folder.name,
        folder=str(folder.path.absolute()),
        status=state.status or "unknown",
        returncode=code,
        dp_sizes=state.dp_sizes,
        steps=max(folder.steps(), default=0),
        data_fingerprint=folder.data_fingerprint(),
        contract_fingerprint=experiment.contract_fingerprint,
        variant=experiment.variant,
        recipe_fingerprint=experiment.recipe_fingerprint,
        eval=evals[max(evals)] if evals else None,
        mlflow_run_id=state.mlflow_run_id,
        tracking=str(tracking),
        messages=messages,
    )
