"""What the tracker mirrors: a run's records as their owner holds them, and the one way to
record how far the mirror got.

The owner is :class:`orchestrator.run.lifecycle.Run`; the tracker never reads or writes
``run.json`` itself (a structural type here, so that tracking does not import the run)."""

from __future__ import annotations

from typing import Any, Protocol

from orchestrator.experiment.run_record import ExperimentRecord, RunState
from orchestrator.experiment.runfolder import RunFolder


class MirroredRun(Protocol):
    """A run whose records MLflow mirrors."""

    @property
    def folder(self) -> RunFolder:
        """Its folder: the training's files (steps, metrics, evals) and the artifacts."""
        ...

    @property
    def experiment(self) -> ExperimentRecord:
        """``experiment.json`` as the owner holds it."""
        ...

    @property
    def state(self) -> RunState:
        """``run.json`` as the owner holds it."""
        ...

    def commit(self, **changes: Any) -> RunState:
        """Set ``changes`` (fields of :class:`RunState`) and write ``run.json`` before
        returning: what MLflow was sent is recorded before anything more is sent."""
        ...
