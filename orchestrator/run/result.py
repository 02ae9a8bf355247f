"""What a run left (:class:`RunResult`; :meth:`orchestrator.run.lifecycle.Run.result` makes
it) and how to call Zephon again."""

from __future__ import annotations

import shutil
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


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
    """``synced``, ``pending`` (run ``zephon sync``) or ``off``
    (:class:`~orchestrator.run.segment_tracking.TrackingState`)."""
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
