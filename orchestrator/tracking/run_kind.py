"""The kinds of MLflow run Zephon creates: the value of each run's ``zephon.kind`` tag
(:data:`~orchestrator.tracking.mlflow_names.TAG_KIND`). Changing one is a format change for
every stored run."""

from __future__ import annotations

from enum import StrEnum


class RunKind(StrEnum):
    """A run's ``zephon.kind`` tag (a member equals the tag's value)."""

    RUN = "run"
    """One training run."""
    PLAN = "plan"
    """A planned job of the job service: its fingerprints and mixture, no metrics."""
    COMPARISON = "comparison"
    """A guard verdict."""
    SWEEP = "sweep"
    """A sweep's parent run."""
    ANSWER = "answer"
    """A sweep's job answered from an earlier run: a link to it, no metrics."""
